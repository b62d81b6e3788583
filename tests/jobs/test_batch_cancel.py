"""Canceling a batch is one operation: its cost, its writes and its hooks do not grow with the
number of shards."""

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs import actions
from jobs.models import Attempt, Family, Job, JobEvent
from jobs.states import State
from tests.factories import ClusterFactory, PriorityClassFactory
from tests.jobs.test_lock_order import run_beside_an_end_in_flight

SPEC = {
    "name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
    "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60,
}  # fmt: skip

# The cancel's own: read the database's clock, lock the shards, lock their attempts, stop them,
# move the shards, look for jobs that depend on the batch (one recursive query), re-read the job
# and its event (the COPY of the events is not a query Django sees); the rest is the API's
# access checks and its answer (its depends_on one of them, the caller's tenants another: the
# jobs a job shared with them alone names are narrowed to those they see; its attempts' nodes
# another; why it ended, its cancel's event, another).
QUERY_BUDGET = 36


def batch_of(owner, tenant, shards: int, running_every: int = 10) -> Job:
    """A batch of `shards` shards; every `running_every`-th one runs a live attempt."""
    spec = {**SPEC, "shards": shards, "priority_class": PriorityClassFactory()}
    first, _ = actions.submit(owner, tenant, spec)
    running = list(first.batch().values_list("pk", flat=True))[::running_every]
    Job.objects.filter(pk__in=running).update(state=State.RUNNING)
    cluster = ClusterFactory()
    Attempt.objects.bulk_create(Attempt(job_id=pk, number=1, cluster=cluster) for pk in running)
    return first


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def queries_to_cancel(user, batch: Job) -> int:
    ContentType.objects.clear_cache()  # each cancel pays for its permission lookups
    with CaptureQueriesContext(connection) as queries:
        response = api(user).post(f"/api/v1/jobs/{batch.pk}/cancel/")
    assert response.status_code == 202
    return len(queries)


@pytest.mark.django_db
def test_canceling_500_shards_takes_as_many_queries_as_canceling_50(alice, alpha):
    small, large = batch_of(alice, alpha, 50), batch_of(alice, alpha, 500)

    for_50, for_500 = queries_to_cancel(alice, small), queries_to_cancel(alice, large)

    assert for_500 == for_50
    assert for_500 <= QUERY_BUDGET


@pytest.mark.django_db
def test_canceling_a_batch_cancels_every_shard_with_one_event_each(alice, alpha):
    batch = batch_of(alice, alpha, 500)
    Job.objects.filter(parent=batch, shard_index=1).update(state=State.SUCCEEDED)

    event = actions.cancel(batch, "canceled by alice")

    states = dict(batch.batch().values_list("shard_index", "state"))
    assert states.pop(1) == State.SUCCEEDED
    assert set(states.values()) == {State.CANCELED}
    cancels = JobEvent.objects.filter(job__in=batch.batch(), to_state=State.CANCELED)
    assert sorted(cancels.values_list("job__shard_index", flat=True)) == sorted(states)
    assert event.job_id == batch.pk
    assert batch.state == State.CANCELED  # the caller's instance too


@pytest.mark.django_db
def test_canceling_a_batch_asks_every_live_attempt_to_stop_and_names_it_in_the_event(alice, alpha):
    batch = batch_of(alice, alpha, 500)

    actions.cancel(batch, "canceled by alice")

    attempts = Attempt.objects.filter(job__in=batch.batch())
    assert attempts.count() == 50
    assert set(attempts.values_list("stop_reason", "reason")) == {("canceled", "canceled by alice")}
    assert not attempts.filter(stop_requested_at__isnull=True).exists()
    events = JobEvent.objects.filter(job__in=batch.batch(), attempt__isnull=False)
    assert sorted(events.values_list("attempt_id", flat=True)) == sorted(
        attempts.values_list("pk", flat=True)
    )


@pytest.mark.django_db
def test_canceling_a_batch_publishes_once_and_kicks_once_after_commit(
    alice, alpha, django_capture_on_commit_callbacks, monkeypatch
):
    batch = batch_of(alice, alpha, 500)
    kicks, published = [], []
    monkeypatch.setattr(actions.lifecycle, "kick", lambda: kicks.append(1))
    monkeypatch.setattr("jobs.events.publish", published.append)

    with django_capture_on_commit_callbacks(execute=True) as hooks:
        actions.cancel(batch)

    assert len(hooks) == 2
    assert len(kicks) == 1
    ((tenant, changes),) = [item for message in published for item in message.items()]
    assert tenant == alpha.pk
    assert len(changes) == 500


@pytest.mark.django_db
def test_canceling_an_ended_batch_writes_nothing(alice, alpha, django_capture_on_commit_callbacks):
    batch = batch_of(alice, alpha, 5)
    Job.objects.filter(pk__in=batch.batch()).update(state=State.SUCCEEDED)

    with django_capture_on_commit_callbacks() as hooks:
        assert actions.cancel(batch) is None

    assert hooks == []
    assert not JobEvent.objects.filter(to_state=State.CANCELED).exists()


@pytest.mark.django_db(transaction=True)
def test_canceling_a_batch_waits_for_a_shards_lock_before_it_touches_the_attempts(alice, alpha):
    batch = batch_of(alice, alpha, 3, running_every=2)  # shards 0 and 2 run
    attempt = Attempt.objects.get(job__shard_index=2, job__in=batch.batch())

    run_beside_an_end_in_flight(attempt.job_id, attempt.pk, actions.cancel, batch)

    assert set(batch.batch().values_list("state", flat=True)) == {State.CANCELED}
