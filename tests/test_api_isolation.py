"""Tenants are isolated on every call of the users' API: each call that changes something,
sent as its rightful caller sends it, is refused and writes nothing when another sends it (the
owner of another team, a viewer of the team, a read-only token of the team's owner, a team's
owner on a platform admin's call); no call that reads shows another team's jobs, logs,
labels, secrets, members, volumes or bookings to the owner of another team, whatever it is
asked; and no call shows a secret's value to anyone."""

import pytest
import yaml
from django.contrib.admin.models import LogEntry

from clusters.models import Booking, MaintenanceWindow, Node
from jobs.models import Attempt, Dependency, Job, JobEvent, LogChunk
from quotas import tenant_secrets
from quotas.models import ApiToken, Membership, Tenant, TenantSecret
from quotas.tokens import create_token
from tests.factories import MembershipFactory, TenantVolumeFactory, UserFactory
from tests.test_api_bad_input import operations, platform  # noqa: F401 (a fixture)
from tests.test_api_concurrency import CALLS, Cases, api, later, sent
from tests.test_openapi import SPEC, root, world  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

# What only alpha's members (and platform admins) may read: planted in its job's name, a log
# line, a secret's name, a member's name, a volume's name, a booking's reason.
MARK = "zqalphaonly"
# Alpha's job's label, `team=LABEL`: lists filtered by it name MARK only in a row of it (a
# page may say the filter it was asked, which names LABEL, not MARK).
LABEL = "zqlabel"
# What nobody reads back: a secret's value.
SECRET_VALUE = "zq-sealed-value-1234"
# Calls on the caller's own account, which another's call cannot reach.
OWN = {"token delete", "cli login"}
# A call that filters the caller's own jobs: another's ids match none of them (a 200 saying
# none was canceled), so it writes nothing.
FILTERS = {"cancel matching"}
# A question that writes nothing (when a job would start), which a read-only token may ask.
QUESTIONS = {"test"}


@pytest.fixture
def marked(platform, alice, alpha, root):  # noqa: F811
    """Alpha's things, each naming MARK where it has a name or text."""
    job = api(alice).post("/api/v1/jobs/", {**SPEC, "name": MARK, "labels": {"team": LABEL}},
                          format="json").json()["id"]  # fmt: skip
    attempt = Attempt.objects.get(job_id=platform["id"])
    LogChunk.objects.create(attempt=attempt, seq=1, text=f"{MARK} step 2 loss 0.2")
    tenant_secrets.put(alpha, f"{MARK.upper()}_TOKEN", SECRET_VALUE)
    MembershipFactory(tenant=alpha, user=UserFactory(username=MARK), role="viewer")
    TenantVolumeFactory(tenant=alpha, name=f"{MARK}-data")
    booking = {"tenant": "alpha", "cluster": "east", "nodes": ["gpu-b"], "starts_at": later(24),
               "ends_at": later(25), "reason": f"{MARK} rehearsal"}  # fmt: skip
    assert api(root).post("/api/v1/bookings/", booking, format="json").status_code == 201
    return {**platform, "queued": job, "name": f"{MARK.upper()}_TOKEN", "username": MARK}


def footprint():
    """All a call could write."""
    return (
        list(Job.objects.order_by("pk").values(
            "pk", "state", "held", "priority", "max_runtime_s", "gpus", "gpu_types", "labels",
            "max_retries", "notify_start", "max_running_shards", "min_workers")),
        list(Attempt.objects.order_by("pk").values("pk", "outcome")),
        JobEvent.objects.count(), Dependency.objects.count(),
        list(Membership.objects.order_by("pk").values("tenant", "user", "role")),
        list(TenantSecret.objects.order_by("pk").values("tenant", "name", "updated")),
        list(Booking.objects.order_by("pk").values()),
        list(MaintenanceWindow.objects.order_by("pk").values()),
        list(Node.objects.order_by("pk").values("name", "schedulable", "cordon_reason")),
        list(Tenant.objects.order_by("pk").values("slug", "placements_paused")),
        list(ApiToken.objects.order_by("pk").values_list("pk", flat=True)),
        LogEntry.objects.count(),
    )  # fmt: skip


def test_no_changing_call_reaches_a_team_from_outside_it(platform, alice, alpha, charlie, root):  # noqa: F811
    vera = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=vera, role=Membership.Role.VIEWER)
    read_only = create_token(alice, "dashboard", read_only=True)[1]
    cases = Cases(alice, root)
    reached = []
    for name in CALLS.values():
        if name in OWN:
            continue
        user, method, url, body = cases.prepare(name)
        intruders = {"charlie (gamma's owner)": charlie, "vera (alpha's viewer)": vera,
                     "alice's read-only token": read_only}  # fmt: skip
        if user == root:
            intruders["alice (alpha's owner)"] = alice
        for who, intruder in intruders.items():
            before = footprint()
            answer = sent((intruder, method, url, body))
            wrote = footprint() != before
            harmless = name in FILTERS or (name in QUESTIONS and intruder == read_only)
            taken = answer.status_code < 400 and not (harmless and not wrote)
            if wrote or taken:
                reached.append(f"{who}: {method} {url}: {answer.status_code}, wrote: {wrote}")

    assert not reached, yaml.safe_dump(reached, width=200)


def text_of(answer) -> str:
    body = b"".join(answer.streaming_content) if answer.streaming else answer.content
    return body.decode(errors="replace")


def reads(ids: dict) -> list[str]:
    """Every reading call of the API, its path filled with alpha's things, its lists also
    asked for alpha's own."""
    urls = []
    for path, method, _, _ in operations():
        if method == "get":
            url = path.format(**ids)
            urls.append(url)
            if "{" not in path:
                urls += [f"{url}?tenant=alpha", f"{url}?label=team={LABEL}"]
    return urls


def test_no_reading_call_shows_a_team_to_the_owner_of_another(marked, charlie):
    api_of_charlie = api(charlie)
    shown = []
    for url in reads({**marked, "id": marked["queued"]}) + reads(marked):
        answer = api_of_charlie.get(url)
        if MARK in text_of(answer).lower():
            shown.append(f"{url}: {answer.status_code}")

    assert not shown, yaml.safe_dump(shown, width=200)


def test_no_reading_call_shows_a_secrets_value(marked, alice, root):  # noqa: F811
    shown = []
    for user in (alice, root):
        for url in reads({**marked, "id": marked["queued"]}) + reads(marked):
            if SECRET_VALUE in text_of(api(user).get(url)):
                shown.append(f"{user}: {url}")

    assert not shown, yaml.safe_dump(shown, width=200)


def test_the_planted_things_are_read_by_their_team(marked, alice):
    # What the two tests above look for is there to be found by those who may see it.
    found = {url for url in reads({**marked, "id": marked["queued"]}) + reads(marked)
             if MARK in text_of(api(alice).get(url)).lower()}  # fmt: skip
    assert {"/api/v1/jobs/", f"/api/v1/jobs/{marked['id']}/logs/", "/api/v1/volumes/",
            "/api/v1/bookings/", "/api/v1/tenants/alpha/members/",
            "/api/v1/tenants/alpha/secrets/"} <= found  # fmt: skip
