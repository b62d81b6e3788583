"""A job retried after its node failed it runs on another node: the snapshot gives the core the
nodes where its attempts ended for a node's fault (an infrastructure failure, workers lost),
but not those lost because their cluster's agent went quiet, nor the job's own errors."""

import pytest

from clusters.models import Node
from jobs import actions, cycle, snapshot
from jobs.models import Attempt, Job
from jobs.states import State
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


def node_of(attempt: Attempt) -> Node:
    return Node.objects.get(pk=attempt.allocations.values_list("node_id", flat=True).first())


def fail_first_attempt(job: Job, outcome: str, reason: str = "worker 0: Xid 79") -> Node:
    """Place the job, end its attempt as ``outcome``; the node it ran on."""
    cycle.run_cycle()
    attempt = job.attempts.get()
    actions.end_attempt(attempt.pk, outcome, reason=reason)
    return node_of(attempt)


def after_backoff(job: Job) -> float:
    job.refresh_from_db()
    return job.not_before.timestamp() + 1 if job.not_before else None


def avoided(job: Job, now: float | None = None) -> tuple[str, ...]:
    loaded = snapshot.load(now or after_backoff(job))
    (queued,) = [q for q in loaded.snapshot.queued if q.id == str(job.pk)]
    return queued.avoid_nodes


def test_a_job_its_node_failed_runs_again_on_another_node(east):
    NodeFactory(cluster=east, name="tight", gpu_count=1)  # the best fit for one GPU
    NodeFactory(cluster=east, name="roomy", gpu_count=2)
    job = JobFactory(gpus=1, max_retries=3)
    failed_on = fail_first_attempt(job, Outcome.INFRA_ERROR)
    assert failed_on.name == "tight"

    cycle.run_cycle(after_backoff(job))

    job.refresh_from_db()
    assert job.state == State.SCHEDULED
    assert node_of(job.attempts.get(number=2)).name == "roomy"


def test_workers_lost_on_a_node_keep_the_retry_off_it(east):
    for name in ("a", "b"):
        NodeFactory(cluster=east, name=name, gpu_count=1)
    job = JobFactory(gpus=1, max_retries=3)
    failed_on = fail_first_attempt(job, Outcome.LOST, reason="worker 0: node gone")

    assert avoided(job) == (str(failed_on.pk),)


def test_work_lost_with_its_clusters_agent_is_not_kept_off_the_node(east):
    NodeFactory(cluster=east, name="a", gpu_count=1)
    job = JobFactory(gpus=1, max_retries=3)
    fail_first_attempt(job, Outcome.LOST, reason=Attempt.AGENT_SILENT)

    assert avoided(job) == ()


def test_a_jobs_own_error_retried_is_not_kept_off_the_node(east):
    NodeFactory(cluster=east, name="a", gpu_count=1)
    job = JobFactory(gpus=1, max_retries=3, retry_user_errors=True)
    fail_first_attempt(job, Outcome.USER_ERROR, reason="worker 0 exited with code 1")

    assert avoided(job) == ()


def test_a_job_only_its_failed_node_can_hold_runs_there_again(east):
    NodeFactory(cluster=east, name="a", gpu_count=1)
    job = JobFactory(gpus=1, max_retries=3)
    failed_on = fail_first_attempt(job, Outcome.INFRA_ERROR)

    cycle.run_cycle(after_backoff(job))

    job.refresh_from_db()
    assert job.state == State.SCHEDULED
    assert node_of(job.attempts.get(number=2)) == failed_on


def test_the_retry_waits_for_another_node_rather_than_go_back(east):
    NodeFactory(cluster=east, name="a", gpu_count=1)
    NodeFactory(cluster=east, name="b", gpu_count=1)
    job = JobFactory(gpus=1, max_retries=3, name="retried")
    failed_on = fail_first_attempt(job, Outcome.INFRA_ERROR)
    # Another job takes the other node (the failed one cordoned meanwhile).
    Node.objects.filter(pk=failed_on.pk).update(schedulable=False)
    JobFactory(gpus=1, name="other", max_runtime_s=3600)
    cycle.run_cycle()
    Node.objects.filter(pk=failed_on.pk).update(schedulable=True)

    cycle.run_cycle(after_backoff(job))

    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert job.pending_reason in {"avoiding_failed_nodes", "head_of_line"}
    assert job.estimated_start is not None


def test_a_failure_older_than_the_window_is_forgotten(east, settings):
    NodeFactory(cluster=east, name="a", gpu_count=1)
    NodeFactory(cluster=east, name="b", gpu_count=1)
    job = JobFactory(gpus=1, max_retries=3)
    fail_first_attempt(job, Outcome.INFRA_ERROR)
    later = after_backoff(job) + settings.MLSCHED_QUARANTINE_WINDOW_S

    assert avoided(job, later) == ()


def test_a_node_an_admin_put_back_in_service_is_not_kept_off(east):
    NodeFactory(cluster=east, name="a", gpu_count=1)
    NodeFactory(cluster=east, name="b", gpu_count=1)
    job = JobFactory(gpus=1, max_retries=3)
    failed_on = fail_first_attempt(job, Outcome.INFRA_ERROR)
    actions.set_schedulable([failed_on.pk], False)  # taken out, repaired, put back

    actions.set_schedulable([failed_on.pk], True)

    assert avoided(job) == ()


def test_a_pull_the_registry_failed_does_not_keep_the_retry_off_the_node(east):
    NodeFactory(cluster=east, name="a", gpu_count=1)
    NodeFactory(cluster=east, name="b", gpu_count=1)
    job = JobFactory(gpus=1, max_retries=3)
    reason = (
        "worker 0: ImagePullBackOff: Back-off pulling image: ErrImagePull: 503 Service Unavailable"
    )
    fail_first_attempt(job, Outcome.INFRA_ERROR, reason=reason)

    assert avoided(job) == ()
