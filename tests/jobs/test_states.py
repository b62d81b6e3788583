import pytest
from django.db import IntegrityError

from jobs import actions
from jobs.models import Attempt, JobEvent
from jobs.states import EDGES, TERMINAL, IllegalTransition, State
from tests.factories import AttemptFactory, JobFactory

LEGAL = sorted((s, t) for s, targets in EDGES.items() for t in targets)
ILLEGAL = sorted((s, t) for s in State.values for t in State.values if t not in EDGES[s])

# The shortest path from queued to each state, along legal edges.
PATH_TO = {
    State.QUEUED: [],
    State.SCHEDULED: [State.SCHEDULED],
    State.RUNNING: [State.SCHEDULED, State.RUNNING],
    State.SUCCEEDED: [State.SCHEDULED, State.RUNNING, State.SUCCEEDED],
    State.FAILED: [State.SCHEDULED, State.RUNNING, State.FAILED],
    State.CANCELED: [State.CANCELED],
}


def job_in(state):
    job = JobFactory()
    for step in PATH_TO[state]:
        actions.transition(job, step, "test setup")
    return job


def test_it_has_the_documented_edges():
    assert EDGES[State.QUEUED] == {State.SCHEDULED, State.CANCELED, State.SUCCEEDED}
    assert EDGES[State.SCHEDULED] == {
        State.RUNNING, State.QUEUED, State.FAILED, State.CANCELED, State.SUCCEEDED
    }  # fmt: skip
    assert EDGES[State.RUNNING] == {State.SUCCEEDED, State.FAILED, State.CANCELED, State.QUEUED}
    assert TERMINAL == {State.SUCCEEDED, State.FAILED, State.CANCELED}


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), ILLEGAL)
def test_it_refuses_illegal_transitions(source, target):
    job = job_in(source)
    events_before = JobEvent.objects.filter(job=job).count()

    with pytest.raises(IllegalTransition):
        actions.transition(job, target, "not allowed")

    job.refresh_from_db()
    assert job.state == source
    assert JobEvent.objects.filter(job=job).count() == events_before


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), LEGAL)
def test_each_transition_leaves_exactly_one_event(source, target):
    job = job_in(source)
    events_before = JobEvent.objects.filter(job=job).count()

    event = actions.transition(job, target, "because")

    job.refresh_from_db()
    assert job.state == target
    new = list(JobEvent.objects.filter(job=job).order_by("id")[events_before:])
    assert new == [event]
    assert (event.from_state, event.to_state, event.reason) == (source, target, "because")


@pytest.mark.django_db
def test_it_refuses_a_transition_from_a_stale_state():
    job = JobFactory()
    stale = type(job).objects.get(pk=job.pk)
    actions.transition(job, State.CANCELED, "canceled first")

    with pytest.raises(IllegalTransition):
        actions.transition(stale, State.SCHEDULED, "placed on a stale read")

    job.refresh_from_db()
    assert job.state == State.CANCELED
    assert list(job.events.values_list("to_state", flat=True)) == [State.CANCELED]


@pytest.mark.django_db
def test_it_keeps_the_first_start_time_across_retries():
    job = job_in(State.RUNNING)
    first_start = job.started_at
    actions.transition(job, State.QUEUED, "infra failure")
    actions.transition(job, State.SCHEDULED, "placed again")

    actions.transition(job, State.RUNNING, "started again")

    job.refresh_from_db()
    assert job.started_at == first_start


@pytest.mark.django_db
def test_it_sets_finished_at_on_terminal_states():
    job = job_in(State.RUNNING)
    assert job.finished_at is None

    actions.transition(job, State.SUCCEEDED, "exit 0")

    job.refresh_from_db()
    assert job.finished_at is not None


@pytest.mark.django_db
def test_cancel_asks_the_live_attempt_to_stop():
    job = job_in(State.RUNNING)
    attempt = AttemptFactory(job=job)

    event = actions.cancel(job, "user asked")

    attempt.refresh_from_db()
    job.refresh_from_db()
    assert job.state == State.CANCELED
    assert event.attempt == attempt
    assert attempt.stop_requested_at is not None
    assert attempt.stop_reason == "canceled"


@pytest.mark.django_db
def test_cancel_of_an_ended_job_does_nothing():
    job = job_in(State.SUCCEEDED)

    assert actions.cancel(job) is None

    job.refresh_from_db()
    assert job.state == State.SUCCEEDED
    assert job.events.count() == len(PATH_TO[State.SUCCEEDED])


@pytest.mark.django_db(transaction=True)
def test_a_transition_whose_event_cannot_be_written_leaves_the_job_as_it_was():
    job = JobFactory()
    missing = Attempt(pk=987_654_321)  # the event's foreign key fails when the transaction ends

    with pytest.raises(IntegrityError):
        actions.transition(job, State.CANCELED, "canceled", attempt=missing)

    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_an_overlong_reason_is_cut_to_fit():
    job = JobFactory()

    event = actions.transition(job, State.CANCELED, "x" * 1000)

    event.refresh_from_db()
    assert event.reason == "x" * 300
