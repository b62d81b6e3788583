"""Where workers' stored logs end, for an agent restarted beside them (the heartbeat's
`resume_logs`): for all the workers one beat asks about, in two queries.

A log may hold a million lines, so neither query reads a log whole: each walks the
(attempt, worker, seq) index from a log's end (its last line, then back over the lines that
share its stamp) or looks up its line 0. Both are plain SQL that PostgreSQL and SQLite run
alike: scalar subqueries per asked worker, never a join the planner could make a scan of the
table.
"""

from datetime import UTC, datetime

from django.db import connection
from django.utils.dateparse import parse_datetime

from clusters.backends import base
from jobs.models import LogChunk

Key = tuple[int, int]  # (attempt id, rank)

NOTHING = {"seq": None, "at": None, "taken": 0, "first": None}


def log_ends(keys: list[Key]) -> dict[Key, dict]:
    """Where each worker's stored log ends, as the heartbeat answers: the last line's seq, its
    stamp (`at`, seconds since the epoch), how many lines in a row up to it share that stamp
    (`taken`), and line 0's stamp and base.line_head (`first`, None unless line 0 is stored
    with a stamp). NOTHING for a worker without a stored line."""
    if not keys:
        return {}
    ends: dict[Key, dict] = {}
    stamped: list[tuple[int, int, int]] = []  # a log ending unstamped (local) has seq alone
    for attempt_id, rank, seq, at, first_at, first_text in _last_and_first_lines(keys):
        if seq is None:
            ends[attempt_id, rank] = dict(NOTHING)
            continue
        first = None if first_at is None else {"at": seconds(first_at), "text": first_text}
        ends[attempt_id, rank] = {"seq": seq, "at": seconds(at), "taken": 0, "first": first}
        if at is not None:
            stamped.append((attempt_id, rank, seq))
    for attempt_id, rank, taken in _runs_at_the_end(stamped):
        ends[attempt_id, rank]["taken"] = taken
    return ends


def _last_and_first_lines(keys: list[Key]) -> list[tuple]:
    """(attempt, rank, last seq, its stamp, line 0's stamp, line 0's head) of each key; the
    last four None where the log has no line, the last two where it has no line 0."""
    of_key = f"FROM {_chunks()} c WHERE {_same_log('c', 'asked')}"
    last, first = f"{of_key} ORDER BY c.seq DESC LIMIT 1", f"{of_key} AND c.seq = 0"
    sql = f"""
        WITH asked (attempt_id, worker) AS (VALUES {", ".join(["(%s, %s)"] * len(keys))})
        SELECT asked.attempt_id, asked.worker, (SELECT c.seq {last}), (SELECT c.logged_at {last}),
            (SELECT c.logged_at {first}), (SELECT SUBSTR(c.text, 1, %s) {first})
        FROM asked
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [*(value for key in keys for value in key), base.LINE_HEAD])
        return cursor.fetchall()


def _runs_at_the_end(ends: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """(attempt, rank, taken) for each (attempt, rank, last seq): how many lines in a row up to
    the last one share its stamp. The walk back from the last line stops at the first line
    stamped otherwise (or not at all), and only the lines after it are counted: both as long
    as that run, however long the log, and however its clock stepped before."""
    if not ends:
        return []
    chunks = _chunks()
    last_at = f"""
        SELECT e.logged_at FROM {chunks} e WHERE {_same_log("e", "ends")} AND e.seq = ends.seq
    """
    before_run = f"""
        SELECT d.seq FROM {chunks} d
        WHERE {_same_log("d", "ends")} AND d.seq < ends.seq
            AND (d.logged_at IS NULL OR d.logged_at <> ({last_at}))
        ORDER BY d.seq DESC LIMIT 1
    """
    sql = f"""
        WITH ends (attempt_id, worker, seq) AS (VALUES {", ".join(["(%s, %s, %s)"] * len(ends))})
        SELECT ends.attempt_id, ends.worker, (
            SELECT COUNT(*) FROM {chunks} c
            WHERE {_same_log("c", "ends")} AND c.seq <= ends.seq
                AND c.seq > COALESCE(({before_run}), -1)
        )
        FROM ends
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for end in ends for value in end])
        return cursor.fetchall()


def _chunks() -> str:
    return connection.ops.quote_name(LogChunk._meta.db_table)


def _same_log(alias: str, key: str) -> str:
    """The condition that the line `alias` is of the worker the row `key` names."""
    return f"{alias}.attempt_id = {key}.attempt_id AND {alias}.worker = {key}.worker"


def seconds(stamp: datetime | str | None) -> float | None:
    """A stamp read by raw SQL, in seconds since the epoch (SQLite gives its text, in UTC)."""
    if stamp is None:
        return None
    moment = parse_datetime(stamp) if isinstance(stamp, str) else stamp
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
