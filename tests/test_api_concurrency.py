"""Calls of the users' API that change something, sent at once, answer as they would one after
the other: each documented call that changes something is sent twice at once, and must give
the answers the same two calls give in turn (never a 500, never two successes where the
second one is refused in turn); and calls that must not both succeed (two owners each taking
the other's ownership, two teams booking the same node, submissions past a team's limit on
queued jobs) do not.

Each call is held at its first write or row lock until the other has reached one too, so that
both have read what they check before either writes: the race is played every time, not by
chance. A call that answers without a write lets the other go on alone."""

import contextlib
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import yaml
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import Booking, Node
from jobs import actions, cycle
from jobs.models import Job, JobEvent
from jobs.states import State
from quotas import tenant_secrets
from quotas.models import Membership, TenantSecret
from quotas.tokens import create_token
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_openapi import BATCH, DOCUMENT, SPEC, root, world  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

# A statement that writes, or locks what it reads: where a call is held.
WRITES = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE)\b|\bFOR (NO KEY )?UPDATE\b|\bFOR SHARE\b|pg_advisory", re.I
)


class HeldAtFirstWrite:
    """A connection's execute wrapper holding its first write or lock at `barrier`."""

    def __init__(self, barrier: threading.Barrier):
        self.barrier = barrier
        self.held = False

    def __call__(self, execute, sql, params, many, context):
        if not self.held and WRITES.search(sql):
            self.held = True
            # Broken: the other call answered without a write, this one goes on alone.
            with contextlib.suppress(threading.BrokenBarrierError):
                self.barrier.wait()
        return execute(sql, params, many, context)


def api(user) -> APIClient:
    """A client of `user`, or of the API token whose key it is."""
    client = APIClient()
    client.raise_request_exception = False  # a 500 is an answer to count, not an error raised
    if isinstance(user, str):
        client.credentials(HTTP_AUTHORIZATION=f"Token {user}")
    else:
        client.force_authenticate(user)
    return client


def sent(call):
    user, method, url, body = call
    return getattr(api(user), method)(url, body, format="json")


def at_once(*calls, send=sent) -> list:
    """The answers to the calls, sent (`send`) each from its own thread and connection, each
    held at its first write until all have reached theirs (or one has answered without a
    write)."""
    barrier = threading.Barrier(len(calls), timeout=10)

    def run(call):
        held = HeldAtFirstWrite(barrier)
        try:
            with connection.execute_wrapper(held):
                return send(call)
        finally:
            if not held.held:
                barrier.abort()  # none to wait for: let the others go on alone
            connection.close()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def in_turn(*calls) -> list:
    return [sent(call) for call in calls]


def later(hours: int) -> str:
    return (timezone.now() + timedelta(hours=hours)).isoformat()


# The changes of a queued job, each with a body: what each is sent.
EDITS = {
    "cancel": None, "hold": None, "priority": {"priority": 1},
    "runtime-limit": {"max_runtime_s": 1800}, "request": {"gpus": 2},
    "constraints": {"gpu_types": ["A100"]}, "labels": {"labels": {"k": "v"}},
    "notifications": {"notify_start": True}, "retries": {"max_retries": 2},
}  # fmt: skip
# What those changes change of a job, and what the API says of it.
CHANGED = ["state", "held", "priority", "max_runtime_s", "gpus", "gpu_types", "labels",
           "notify_start", "max_retries"]  # fmt: skip


class Cases:
    """Each changing call of the API, on objects of its own: `prepare(name)` makes them and
    gives (user, method, url, body), the call as the test sends it twice."""

    def __init__(self, owner, admin):
        self.alice, self.root = owner, admin
        self.count = 0

    def job(self, **spec) -> int:
        self.count += 1
        body = {**SPEC, "gpus": 1, "workers": 1, "name": f"j{self.count}", **spec}
        return api(self.alice).post("/api/v1/jobs/", body, format="json").json()["id"]

    def placed(self) -> int:
        # Jobs earlier cases left queued would be placed first, and may fill the cluster.
        actions.cancel_jobs(Job.objects.filter(state=State.QUEUED), "making room")
        job = self.job()
        cycle.run_cycle()
        assert Job.objects.get(pk=job).state != "queued"
        return job

    def ended(self) -> int:
        job = self.job()
        api(self.alice).post(f"/api/v1/jobs/{job}/cancel/")
        assert Job.objects.get(pk=job).state == "canceled"
        return job

    def member(self) -> str:
        self.count += 1
        user = UserFactory(username=f"m{self.count}")
        MembershipFactory(tenant=self.alice.memberships.get().tenant, user=user)
        return user.username

    def secret(self) -> str:
        self.count += 1
        name = f"S{self.count}"
        tenant_secrets.put(self.alice.memberships.get().tenant, name, "value-1234")
        return name

    def window(self, kind: str) -> int:
        body = {"cluster": "east", "nodes": ["gpu-b"], "starts_at": later(48),
                "ends_at": later(49), "reason": "r"}  # fmt: skip
        if kind == "bookings":
            body["tenant"] = "alpha"
        return api(self.root).post(f"/api/v1/{kind}/", body, format="json").json()["id"]

    def prepare(self, name: str):
        a, r, job = self.alice, self.root, f"/api/v1/jobs/{{}}/{name}/"
        if name in EDITS:
            return a, "post", job.format(self.job()), EDITS[name]
        if name == "release":
            held = self.job()
            api(a).post(f"/api/v1/jobs/{held}/hold/")
            return a, "post", job.format(held), None
        if name == "requeue":
            return a, "post", job.format(self.placed()), {"hold": False}
        if name == "shard-limit":
            return a, "post", job.format(self.job(**BATCH)), {"max_running_shards": 1}
        if name == "min-workers":
            elastic = self.job(workers=2, min_workers=1)
            return a, "post", job.format(elastic), {"min_workers": 2}
        if name == "dependencies":
            return a, "post", job.format(self.job()), {"depends_on": [self.job()]}
        if name == "resubmit":
            return a, "post", job.format(self.ended()), {}
        if name == "submit":
            self.count += 1
            return a, "post", "/api/v1/jobs/", {**SPEC, "idempotency_key": f"k{self.count}"}
        if name == "test":
            return a, "post", "/api/v1/jobs/test/", SPEC
        if name == "cancel matching":
            return a, "post", "/api/v1/jobs/cancel/", {"ids": [self.job(), self.job()]}
        if name in ("maintenance", "bookings"):
            body = {"cluster": "east", "nodes": ["gpu-b"], "starts_at": later(24),
                    "ends_at": later(25), "reason": "r"}  # fmt: skip
            if name == "bookings":
                body["tenant"] = "alpha"
            return r, "post", f"/api/v1/{name}/", body
        if name in ("maintenance delete", "bookings delete"):
            kind = name.split()[0]
            return r, "delete", f"/api/v1/{kind}/{self.window(kind)}/", None
        if name in ("cordon", "drain", "uncordon"):
            Node.objects.filter(name="gpu-b").update(schedulable=name != "uncordon")
            return r, "post", f"/api/v1/nodes/east/gpu-b/{name}/", {"reason": "r"}
        if name == "token delete":
            self.count += 1
            return create_token(a, f"t{self.count}")[1], "delete", "/api/v1/me/token/", None
        if name == "cli login":
            return a, "post", "/api/v1/cli-logins/", {"name": "laptop"}
        if name == "apply":
            self.count += 1
            team = {"slug": f"t{self.count}", "name": f"T{self.count}", "max_queued_jobs": 5}
            return r, "post", "/api/v1/tenants/apply/", {"document": yaml.safe_dump(
                {"tenants": [team]})}  # fmt: skip
        if name in ("pause", "resume"):
            self.count += 1
            slug = TenantFactory(slug=f"p{self.count}").slug
            if name == "resume":
                api(r).post(f"/api/v1/tenants/{slug}/pause/", {"reason": "x"}, format="json")
            return r, "post", f"/api/v1/tenants/{slug}/{name}/", {"reason": "r"}
        if name == "member add":
            self.count += 1
            UserFactory(username=f"n{self.count}")
            return a, "post", "/api/v1/tenants/alpha/members/", {"username": f"n{self.count}"}
        if name == "member change":
            url = f"/api/v1/tenants/alpha/members/{self.member()}/"
            return a, "patch", url, {"role": "viewer"}
        if name == "member delete":
            return a, "delete", f"/api/v1/tenants/alpha/members/{self.member()}/", None
        if name == "secret put":
            self.count += 1
            return a, "put", f"/api/v1/tenants/alpha/secrets/N{self.count}/", {"value": "v-1234"}
        if name == "secret delete":
            return a, "delete", f"/api/v1/tenants/alpha/secrets/{self.secret()}/", None
        raise AssertionError(name)


# Each changing call of the API, by its path and method in the OpenAPI document.
CALLS = {
    ("post", "/api/v1/jobs/"): "submit",
    ("post", "/api/v1/jobs/test/"): "test",
    ("post", "/api/v1/jobs/cancel/"): "cancel matching",
    **{("post", f"/api/v1/jobs/{{id}}/{verb}/"): verb
       for verb in ("cancel", "hold", "release", "requeue", "priority", "shard-limit",
                    "min-workers", "runtime-limit", "request", "constraints", "dependencies",
                    "labels", "notifications", "retries", "resubmit")},
    ("post", "/api/v1/maintenance/"): "maintenance",
    ("delete", "/api/v1/maintenance/{id}/"): "maintenance delete",
    ("post", "/api/v1/bookings/"): "bookings",
    ("delete", "/api/v1/bookings/{id}/"): "bookings delete",
    **{("post", f"/api/v1/nodes/{{cluster}}/{{node}}/{verb}/"): verb
       for verb in ("cordon", "drain", "uncordon")},
    ("delete", "/api/v1/me/token/"): "token delete",
    ("post", "/api/v1/cli-logins/"): "cli login",
    ("post", "/api/v1/tenants/apply/"): "apply",
    ("post", "/api/v1/tenants/{slug}/pause/"): "pause",
    ("post", "/api/v1/tenants/{slug}/resume/"): "resume",
    ("post", "/api/v1/tenants/{slug}/members/"): "member add",
    ("patch", "/api/v1/tenants/{slug}/members/{username}/"): "member change",
    ("delete", "/api/v1/tenants/{slug}/members/{username}/"): "member delete",
    ("put", "/api/v1/tenants/{slug}/secrets/{name}/"): "secret put",
    ("delete", "/api/v1/tenants/{slug}/secrets/{name}/"): "secret delete",
}  # fmt: skip
# A call that is not sent twice: its body is a code only the first answer of another gives.
NOT_SENT = {("post", "/api/v1/cli-logins/token/")}


def test_every_changing_call_of_the_api_is_sent_here():
    changing = {(method, path) for path, item in DOCUMENT["paths"].items()
                for method in ("post", "put", "patch", "delete") if method in item}  # fmt: skip
    assert changing == set(CALLS) | NOT_SENT


def test_a_call_sent_twice_at_once_answers_as_twice_in_turn(platform, alice, root, settings):  # noqa: F811
    settings.MLSCHED_SUBMIT_RATE = settings.MLSCHED_TENANT_SUBMIT_RATE = "1000000/minute"
    cases = Cases(alice, root)
    differ = {}
    for name in CALLS.values():
        call = cases.prepare(name)
        serial = [r.status_code for r in in_turn(call, call)]
        call = cases.prepare(name)
        answers = at_once(call, call)
        together = sorted(r.status_code for r in answers)
        if together != sorted(serial) or max(together) >= 500:
            said = [r.content[:300].decode(errors="replace") for r in answers]
            differ[name] = f"in turn {serial}, at once {together}: {said}"

    assert not differ, yaml.safe_dump(differ, width=200)


def test_two_owners_taking_each_others_ownership_at_once_leave_one_owner(alice, alpha):
    dora = UserFactory(username="dora")
    MembershipFactory(tenant=alpha, user=dora, role=Membership.Role.OWNER)
    url = "/api/v1/tenants/alpha/members/{}/"

    answers = at_once((alice, "patch", url.format("dora"), {"role": "member"}),
                      (dora, "patch", url.format("alice"), {"role": "member"}))  # fmt: skip

    assert sorted(a.status_code for a in answers)[0] == 200
    assert alpha.memberships.filter(role=Membership.Role.OWNER).count() == 1


def test_two_teams_booking_one_node_at_once_get_one_booking(world, alpha, root):  # noqa: F811
    TenantFactory(slug="beta")
    body = {"cluster": "east", "nodes": ["gpu-a"], "starts_at": later(24),
            "ends_at": later(26), "reason": "r"}  # fmt: skip
    url = "/api/v1/bookings/"

    answers = at_once((root, "post", url, {**body, "tenant": "alpha"}),
                      (root, "post", url, {**body, "tenant": "beta"}))  # fmt: skip

    assert sorted(a.status_code for a in answers) == [201, 400]
    assert Booking.objects.count() == 1


def test_two_submissions_at_once_past_a_teams_queued_job_limit_queue_one(world, alice, alpha):  # noqa: F811
    alpha.max_queued_jobs = 1
    alpha.save()
    body = {**SPEC, "gpus": 1, "workers": 1}

    answers = at_once(*[(alice, "post", "/api/v1/jobs/", {**body, "name": n}) for n in "ab"])

    assert sorted(a.status_code for a in answers)[0] == 201
    assert sorted(a.status_code for a in answers)[1] >= 400
    assert Job.objects.filter(tenant=alpha).count() == 1


def job_after(job: int) -> tuple:
    """What the changes leave of a job: its fields they change, and its events' changes."""
    row = Job.objects.values(*CHANGED).get(pk=job)
    events = (
        JobEvent.objects.filter(job_id=job).order_by("pk").values_list("from_state", "to_state")
    )
    return tuple(row.values()), sorted(events)


def test_a_change_of_a_job_at_once_with_its_cancel_is_one_of_the_two_in_turn(world, alice, root):  # noqa: F811
    cases = Cases(alice, root)
    differ = {}
    for other in (verb for verb in EDITS if verb != "cancel"):
        outcomes = []
        for order in ("cancel first", "cancel second", "at once"):
            job = cases.job()
            cancel = (alice, "post", f"/api/v1/jobs/{job}/cancel/", None)
            change = (alice, "post", f"/api/v1/jobs/{job}/{other}/", EDITS[other])
            if order == "at once":
                answers = at_once(cancel, change)
            elif order == "cancel first":
                answers = in_turn(cancel, change)
            else:
                answers = in_turn(change, cancel)[::-1]
            outcomes.append(([a.status_code for a in answers], job_after(job)))
        if outcomes[2] not in outcomes[:2]:
            differ[other] = {
                "in turn": [repr(o) for o in outcomes[:2]],
                "at once": repr(outcomes[2]),
            }

    assert not differ, yaml.safe_dump(differ, width=200)


def test_two_changes_of_one_thing_at_once_are_one_of_the_two_in_turn(platform, alice, root):  # noqa: F811
    cases = Cases(alice, root)
    alpha = alice.memberships.get().tenant
    members, secrets = "/api/v1/tenants/alpha/members/{}/", "/api/v1/tenants/alpha/secrets/{}/"

    def member():
        name = cases.member()
        return [(alice, "patch", members.format(name), {"role": "owner"}),
                (alice, "delete", members.format(name), None)], lambda: list(
            alpha.memberships.filter(user__username=name).values_list("role"))  # fmt: skip

    def secret():
        name = cases.secret()
        return [(alice, "put", secrets.format(name), {"value": "v-5678"}),
                (alice, "delete", secrets.format(name), None)], lambda: (
            TenantSecret.objects.filter(tenant=alpha, name=name).exists())  # fmt: skip

    def node():
        Node.objects.filter(name="gpu-b").update(schedulable=True)
        url = "/api/v1/nodes/east/gpu-b/{}/"
        node = Node.objects.filter(name="gpu-b")
        return [(root, "post", url.format("drain"), {"reason": "r"}),
                (root, "post", url.format("uncordon"), {})], lambda: list(
            node.values_list("schedulable", "cordon_reason"))  # fmt: skip

    def pause():
        slug = TenantFactory(slug=f"p{cases.job()}").slug
        url = f"/api/v1/tenants/{slug}/{{}}/"
        tenant = type(alpha).objects.filter(slug=slug)
        return [(root, "post", url.format("pause"), {"reason": "r"}),
                (root, "post", url.format("resume"), {})], lambda: list(
            tenant.values_list("placements_paused", flat=True))  # fmt: skip

    def hold():
        job = cases.job()
        url = f"/api/v1/jobs/{job}/{{}}/"
        return [(alice, "post", url.format("hold"), None),
                (alice, "post", url.format("release"), None)], lambda: job_after(job)  # fmt: skip

    differ = {}
    for pair in (member, secret, node, pause, hold):
        outcomes = []
        for order in ("in turn", "reversed", "at once"):
            calls, left = pair()
            if order == "at once":
                answers = at_once(*calls)
            elif order == "in turn":
                answers = in_turn(*calls)
            else:
                answers = in_turn(*calls[::-1])[::-1]
            outcomes.append(([a.status_code for a in answers], left()))
        if outcomes[2] not in outcomes[:2]:
            differ[pair.__name__] = {"in turn": [repr(o) for o in outcomes[:2]],
                                     "at once": repr(outcomes[2])}  # fmt: skip

    assert not differ, yaml.safe_dump(differ, width=200)
