"""POST /api/v1/jobs/test/, a test-only submission (Slurm's sbatch --test-only): what the
scheduler would decide now for a submission, with nothing written."""

from datetime import UTC, datetime, timedelta

import pytest

from clusters.models import Allocation
from jobs import cycle
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.states import State
from tests.factories import (
    ClusterFactory,
    JobFactory,
    NodeFactory,
    PriorityClassFactory,
    QuotaFactory,
)
from tests.jobs.test_api import SPEC as API_SPEC
from tests.jobs.test_api import client_for, normal_priority  # noqa: F401 - its autouse fixture

pytestmark = pytest.mark.django_db

SPEC = {**API_SPEC, "workers": 1, "gpus": 8}  # one 8 x A100 node's worth
PENDING_FIELDS = ("state", "pending_reason", "pending_message", "estimated_start")


@pytest.fixture
def east(db):
    return ClusterFactory(name="east")


def n8_a100_nodes(count, cluster):
    return NodeFactory.create_batch(count, cluster=cluster, gpu_type="A100", gpu_count=8)


def submit_test_only(user, **changes):
    return client_for(user).post("/api/v1/jobs/test/", {**SPEC, **changes}, format="json")


def submit(user, **changes):
    return client_for(user).post("/api/v1/jobs/", {**SPEC, **changes}, format="json")


def moment(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def written():
    """Everything a submission or a cycle would write."""
    return (
        Job.objects.count(),
        JobEvent.objects.count(),
        Attempt.objects.count(),
        Allocation.objects.count(),
        list(Job.objects.order_by("pk").values_list(*PENDING_FIELDS)),
    )


def test_a_job_that_fits_would_start_now_and_nothing_is_written(alpha, alice, east):
    n8_a100_nodes(3, east)
    JobFactory(tenant=alpha, owner=alice, gpus=8)  # queued, would be placed by a cycle
    JobFactory(tenant=alpha, owner=alice, gpus=16)  # queued, would wait as worker_too_large
    before = written()

    response = submit_test_only(alice, workers=2, idempotency_key="k1")

    assert response.status_code == 200
    answer = response.json()
    assert answer["starts_now"] is True and answer["notes"] == []
    assert [(j["status"], j["clusters"], j["nodes"], j["pending_reason"]) for j in answer["jobs"]] \
        == [("placed", ["east"], 2, "")]  # fmt: skip
    assert written() == before
    assert before[-1] == [(State.QUEUED, "", "", None)] * 2  # no reason stored by the trial
    assert submit(alice, workers=2, idempotency_key="k1").status_code == 201  # the key is free


def test_a_job_behind_the_real_queue_gets_the_reason_and_estimate_the_cycle_would_give_it(
    alpha, alice, east
):
    n8_a100_nodes(1, east)
    JobFactory(tenant=alpha, owner=alice, gpus=8, max_runtime_s=3600)
    cycle.run_cycle()  # it runs for an hour
    JobFactory(tenant=alpha, owner=alice, gpus=8, max_runtime_s=3600)  # next: head of line
    cycle.run_cycle()

    answer = submit_test_only(alice, max_runtime_s=7200).json()  # larger: after it
    job = Job.objects.get(pk=submit(alice, max_runtime_s=7200).json()["id"])
    cycle.run_cycle()

    job.refresh_from_db()
    (trial,) = answer["jobs"]
    assert job.pending_reason not in ("", "head_of_line")  # it waits behind the queue
    assert (trial["pending_reason"], trial["pending_message"]) == (
        job.pending_reason,
        job.pending_message,
    )
    assert moment(trial["estimated_start"]) == job.estimated_start
    assert moment(answer["estimated_start"]) == job.estimated_start
    assert answer["starts_now"] is False


def test_each_shard_of_a_batch_is_answered_on_its_own(alpha, alice, east):
    NodeFactory(cluster=east, gpu_type="A100", gpu_count=2)

    answer = submit_test_only(alice, family=Family.BATCH_INFERENCE, gpus=1, shards=3).json()

    shards = answer["jobs"]
    assert [(j["shard_index"], j["status"], j["clusters"]) for j in shards[:2]] == [
        (0, "placed", ["east"]),
        (1, "placed", ["east"]),
    ]
    assert shards[2]["shard_index"] == 2 and shards[2]["status"] != "placed"
    assert shards[2]["pending_reason"] and shards[2]["estimated_start"] is not None
    assert answer["starts_now"] is False
    assert answer["estimated_start"] == shards[2]["estimated_start"]
    assert not Job.objects.exists()


def test_a_job_its_tenants_quota_does_not_cover_would_wait_as_quota_exceeded(alpha, alice, east):
    n8_a100_nodes(1, east)
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=4, borrow_limit=0)

    answer = submit_test_only(alice).json()

    (trial,) = answer["jobs"]
    assert (trial["status"], trial["pending_reason"]) == ("pending", "quota_exceeded")
    assert "guarantee" in trial["pending_message"]
    assert answer["starts_now"] is False


@pytest.mark.parametrize(
    "changes",
    [
        {"cpu_milli": 0},
        {"family": "mining"},
        {"gpu_milli": 500},  # training with a GPU share
        {"priority_class": "urgent"},
        {"depends_on": [10**9]},
        {"begin": "2026-12-03T02:00:00"},  # no zone
    ],
)
def test_a_bad_body_is_the_same_400_a_submission_gets_and_writes_nothing(alice, changes):
    trial = submit_test_only(alice, **changes)
    submitted = submit(alice, **changes)

    assert trial.status_code == submitted.status_code == 400
    assert trial.json() == submitted.json()
    assert not Job.objects.exists()


def test_another_tenants_slug_is_refused_as_a_submission_refuses_it(alice, charlie, gamma):
    trial = submit_test_only(alice, tenant="gamma")
    submitted = submit(alice, tenant="gamma")

    assert trial.status_code == submitted.status_code == 400
    assert trial.json() == submitted.json() == {"tenant": ["No tenant 'gamma' you may submit to."]}
    assert submit_test_only(charlie, tenant="gamma").status_code == 200  # gamma's own member


def test_a_dependency_that_can_never_be_met_is_the_same_400_a_submission_gets(alpha, alice):
    failed = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)

    trial = submit_test_only(alice, depends_on=[failed.pk])

    assert trial.status_code == 400
    assert trial.json() == submit(alice, depends_on=[failed.pk]).json()
    assert "depends_on" in trial.json()


def test_each_test_only_submission_counts_against_the_users_submission_rate(alice, settings):
    settings.MLSCHED_SUBMIT_RATE = "2/minute"

    codes = [submit_test_only(alice).status_code for _ in range(3)]

    assert codes == [200, 200, 429]
    assert submit(alice).status_code == 429  # the same budget as submissions
    assert not Job.objects.exists()


def test_test_only_submissions_count_against_the_tenants_submission_rate(
    alice, bob, charlie, settings
):
    settings.MLSCHED_TENANT_SUBMIT_RATE = "2/minute"

    codes = [submit_test_only(user).status_code for user in (alice, bob, alice)]

    assert codes == [200, 200, 429]
    assert submit(bob).status_code == 429
    assert submit_test_only(charlie, tenant="gamma").status_code == 200


def test_a_begin_to_come_is_said_and_is_the_estimated_start(alpha, alice, east):
    n8_a100_nodes(1, east)
    begin = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)

    answer = submit_test_only(alice, begin=begin.isoformat()).json()

    assert answer["jobs"][0]["status"] == "placed"  # it would fit now, but waits for its begin
    assert answer["starts_now"] is False
    assert moment(answer["estimated_start"]) == begin
    assert answer["notes"] == [f"Deferred until {cycle.utc_time(begin)} (begin)."]


def test_a_deadline_it_could_not_end_by_from_its_estimated_start_is_said(alpha, alice, east):
    n8_a100_nodes(1, east)
    JobFactory(tenant=alpha, owner=alice, gpus=8, max_runtime_s=3600)
    cycle.run_cycle()  # the node is taken for an hour
    deadline = datetime.now(UTC) + timedelta(minutes=90)

    answer = submit_test_only(alice, deadline=deadline.isoformat()).json()

    start = moment(answer["estimated_start"])
    assert start > deadline - timedelta(seconds=SPEC["max_runtime_s"])
    assert answer["notes"] == [
        f"Deadline {cycle.utc_time(deadline)}: started at its estimated start, "
        f"{cycle.utc_time(start)}, and running its max_runtime_s (3600 s), it could not end "
        "by then; it would be canceled while queued."
    ]


def test_a_dependency_not_met_yet_is_said_and_leaves_no_estimated_start(alpha, alice, east):
    n8_a100_nodes(1, east)
    earlier = JobFactory(tenant=alpha, owner=alice, gpus=1)

    answer = submit_test_only(alice, depends_on=[earlier.pk], gpus=1).json()

    assert answer["jobs"][0]["status"] == "placed"  # free to run, it would fit now
    assert (answer["starts_now"], answer["estimated_start"]) == (False, None)
    assert answer["notes"] == [f"Waiting for job #{earlier.pk} to succeed."]


def test_a_singleton_with_an_earlier_job_of_its_name_live_is_said_to_wait_for_it(
    alpha, alice, east
):
    n8_a100_nodes(1, east)
    earlier = JobFactory(tenant=alpha, owner=alice, name=SPEC["name"], gpus=1)

    answer = submit_test_only(alice, singleton=True, gpus=1).json()

    assert (answer["starts_now"], answer["estimated_start"]) == (False, None)
    assert answer["notes"] == [f"Waiting for job #{earlier.pk} to end (singleton)."]


def test_a_job_that_would_evict_says_so_and_nothing_is_asked_to_stop(alpha, alice, east):
    n8_a100_nodes(1, east)
    low = PriorityClassFactory(name="low", value=-100)
    running = JobFactory(tenant=alpha, owner=alice, gpus=8, preemptible=True, priority_class=low)
    cycle.run_cycle()
    PriorityClassFactory(name="urgent", value=100, may_preempt=True).tenants.add(alpha)

    (job,) = submit_test_only(alice, priority_class="urgent").json()["jobs"]

    assert job["status"] == "preempts"
    assert job["pending_message"].startswith(
        "It would ask 1 lower-priority job to stop, and start once it has gone"
    )
    assert running.attempts.get().stop_requested_at is None
