"""A call that loses the database partway leaves nothing half-written and answers 503: each
documented call of the users' API that changes something has its database connection ended by
the server (pg_terminate_backend, what a restart or a failover does to it) before each of its
statements that writes or locks, in turn. Every table must then be as it was before the call,
and the answer a 503 as JSON with a Retry-After, which clients and load balancers send again
(tests/test_portal_faults.py, tests/test_admin_faults.py, tests/quotas/test_scim_database_lost.py
and tests/clusters/test_agent_database_lost.py do the same for the portal, the admin, SCIM and
the agents' reports)."""

import functools
import itertools

import psycopg
import pytest
import yaml
from django.db import connection

from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_api_concurrency import CALLS, WRITES, Cases, sent
from tests.test_openapi import root, world  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def end_connection(lost) -> None:
    """Has the server end `lost`'s session, and waits until it has (PostgreSQL 14 and later)."""
    given = connection.settings_dict
    where = {"dbname": given["NAME"], "user": given["USER"], "password": given["PASSWORD"],
             "host": given["HOST"], "port": given["PORT"]}  # fmt: skip
    with psycopg.connect(**where, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s, 5000)", [lost.connection.info.backend_pid])


class LostAt:
    """A connection's execute wrapper counting the statements that write or lock, which has
    the connection ended before the `at`-th of them (none: it only counts)."""

    def __init__(self, at: int | None = None):
        self.at, self.seen = at, 0

    def __call__(self, execute, sql, params, many, context):
        if WRITES.search(sql):
            self.seen += 1
            if self.seen == self.at:
                end_connection(context["connection"])
        return execute(sql, params, many, context)


# What a call writes apart, and keeps whatever becomes of the call: the time a token was last
# used, stamped as it authenticates (quotas.tokens).
APART = {"quotas_apitoken": "last_used"}


def every_table() -> dict[str, str]:
    """A digest of each table's rows (without the columns written APART), read in one query."""
    quote = connection.ops.quote_name

    def rows(table: str) -> str:
        kept = f"to_jsonb(row) - '{APART[table]}'" if table in APART else "to_jsonb(row)"
        return f"md5(coalesce(string_agg(({kept})::text, '|' ORDER BY ({kept})::text), ''))"

    reads = [f"SELECT '{table}', {rows(table)} FROM {quote(table)} row"
             for table in connection.introspection.table_names()]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(reads))
        return dict(cursor.fetchall())


def cut_short(send, call, at: int):
    """`send(call)` with its connection ended before its `at`-th write: (its answer, the tables
    it changed, whether the connection was ended)."""
    before = every_table()
    lost = LostAt(at)
    with connection.execute_wrapper(lost):
        answer = send(call)
    connection.close()  # the test client keeps its connection between requests: a new one
    after = every_table()
    changed = sorted(table for table in after if after[table] != before.get(table))
    return answer, changed, lost.seen >= at


def writes_of(send, call) -> int:
    """How many statements that write or lock the call sends, let run."""
    counted = LostAt()
    with connection.execute_wrapper(counted):
        answer = send(call)
    assert answer.status_code < 400, (call, answer.content[:300])
    return counted.seen


def unsound(answer, changed: list[str], said=None) -> str | None:
    """What is wrong with a cut-short call's outcome (`said`: with its answer; the API's by
    default): None if nothing."""
    if changed:
        return f"half-written: {', '.join(changed)} changed (answer {answer.status_code})"
    return (said or not_503)(answer)


def not_503(answer) -> str | None:
    """What is wrong with the answer of a call that lost the database: None if nothing."""
    if answer.status_code != 503 or answer.headers.get("Retry-After") != "5":
        return f"answered {answer.status_code}: {answer.content[:200]!r}"
    if answer.json() != {"detail": "The database did not answer: try again in a few seconds."}:
        return f"said {answer.content[:200]!r}"
    return None


def page_not_503(answer) -> str | None:
    """What is wrong with the page a portal's or the admin's form that lost the database is
    answered with: None if nothing."""
    if answer.status_code != 503 or answer.get("Retry-After") != "5":
        return f"answered {answer.status_code}"
    if b"Try again in a few seconds" not in answer.content:
        return f"said {answer.content[:200]!r}"
    return None


def cut_until_whole(send, call_of, said=page_not_503, afresh=False) -> tuple[dict, int, object]:
    """The call `call_of()` gives sent with its connection ended before its first write, then
    its second, and so on until it runs whole: what went wrong at each write (`said`: with the
    answer of a cut), how many cuts were made, and the answer it ran whole with. A call sent
    again as it was (not `afresh`) stops at a cut that changed something: what that left would
    change what the next cut sees."""
    found: dict[int, str] = {}
    for at in itertools.count(1):
        answer, changed, cut = cut_short(send, call_of(), at)
        if not cut:
            return found, at - 1, answer
        if wrong := unsound(answer, changed, said):
            found[at] = wrong
            if changed and not afresh:
                return found, at, answer
    raise AssertionError("unreachable")


def sweep(prepare, names, send=sent, said=not_503) -> dict:
    """Each call, prepared afresh for each cut, cut short before each of its writes in turn
    until it runs whole, and then succeeds: what went wrong, by call and write."""
    found = {}
    for name in names:
        call_of = functools.partial(prepare, name)
        wrong, _, whole = cut_until_whole(send, call_of, said, afresh=True)
        assert whole.status_code < 400, (name, whole.content[:300])
        found |= {f"{name} at write {at}": what for at, what in wrong.items()}
    return found


def test_a_call_that_loses_the_database_at_any_write_writes_nothing_and_answers_503(
    platform, alice, root, settings  # noqa: F811
):  # fmt: skip
    settings.MLSCHED_SUBMIT_RATE = settings.MLSCHED_TENANT_SUBMIT_RATE = "1000000/minute"
    cases = Cases(alice, root)

    found = sweep(cases.prepare, CALLS.values())

    assert not found, yaml.safe_dump(found, width=200)


def test_the_sweep_finds_a_call_that_writes_in_two_transactions(platform, alice, root):  # noqa: F811
    """A call made of two transactions, cut short in its second, leaves the first's rows: the
    sweep must say so (here the test's own pair of calls stands for such a view)."""
    cases = Cases(alice, root)

    def two_transactions(call):
        first, second = call
        sent(first)
        return sent(second)

    def prepare(name):
        return cases.prepare("hold"), cases.prepare("priority")

    found = sweep(prepare, ["hold then priority"], send=two_transactions)

    assert any("half-written" in said for said in found.values()), found
