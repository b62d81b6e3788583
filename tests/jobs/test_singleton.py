"""Slurm's singleton dependency: the jobs of one tenant, submitter and name form a group, and a
singleton job of it is placed only once every earlier job of the group has ended (a batch counts
as one job), so of its singleton jobs one runs at a time."""

import functools
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import actions, cycle, events, snapshot
from jobs.cli import dependencies_written
from jobs.dependencies import sentence
from jobs.models import Attempt, Family, Job
from jobs.states import State
from tests.jobs.test_dependencies import API_SPEC, FORM, api, in_a_thread, state
from tests.jobs.test_dependency_kinds import finish, submit
from tests.processes import wait_until, waiting_on_a_lock

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("normal_priority", "room")]
Outcome = Attempt.Outcome
NAME = "nightly-eval"


def singleton(owner, tenant, *waits, **spec) -> Job:
    return submit(owner, tenant, *waits, name=NAME, singleton=True, **spec)


def explained(job: Job) -> tuple[str, str]:
    job = Job.objects.get(pk=job.pk)
    return job.pending_reason, job.pending_message


# -- waiting for the earlier jobs of its group --------------------------------------------------


@pytest.mark.parametrize("how", [State.SUCCEEDED, State.FAILED, State.CANCELED])
def test_a_singleton_job_waits_for_an_earlier_job_of_its_name_to_end_in_any_way(alice, alpha, how):
    earlier = submit(alice, alpha, name=NAME)
    later = singleton(alice, alpha)

    assert cycle.run_cycle().placed == [earlier.pk]
    assert explained(later) == (
        "waiting_for_dependency", f"Waiting for job #{earlier.pk} to end (singleton)."
    )  # fmt: skip
    finish(earlier, how)

    assert cycle.run_cycle().placed == [later.pk]


def test_of_the_singleton_jobs_of_one_name_one_runs_at_a_time_in_submission_order(alice, alpha):
    jobs = [singleton(alice, alpha) for _ in range(3)]

    for job in jobs:
        assert cycle.run_cycle().placed == [job.pk]
        assert cycle.run_cycle().placed == []
        finish(job, State.SUCCEEDED)

    assert {state(job) for job in jobs} == {State.SUCCEEDED}


def test_a_singleton_job_names_the_earliest_job_of_its_name_still_in_its_way(alice, alpha):
    first, second = submit(alice, alpha, name=NAME), submit(alice, alpha, name=NAME)
    third = singleton(alice, alpha)
    cycle.run_cycle()
    assert explained(third)[1] == f"Waiting for job #{first.pk} to end (singleton)."

    finish(first, State.SUCCEEDED)
    cycle.run_cycle()

    assert explained(third)[1] == f"Waiting for job #{second.pk} to end (singleton)."


def test_a_singleton_job_waits_for_its_dependencies_too_and_says_both(alice, alpha):
    train, earlier = submit(alice, alpha), submit(alice, alpha, name=NAME)
    report = singleton(alice, alpha, (train, "afterok"))
    cycle.run_cycle()

    assert explained(report)[1] == (
        f"Waiting for job #{train.pk} to succeed and job #{earlier.pk} to end (singleton)."
    )
    finish(earlier, State.SUCCEEDED)
    assert cycle.run_cycle().placed == []
    finish(train, State.SUCCEEDED)
    assert cycle.run_cycle().placed == [report.pk]


@pytest.mark.parametrize(("kind", "what"), [("afterany", "end"), ("afterok", "succeed"),
                                            ("afternotok", "fail")])  # fmt: skip
def test_a_job_both_depended_on_and_in_the_singletons_way_is_named_once(alice, alpha, kind,
                                                                         what):  # fmt: skip
    earlier = submit(alice, alpha, name=NAME)
    later = singleton(alice, alpha, (earlier, kind))
    cycle.run_cycle()

    assert explained(later)[1] == f"Waiting for job #{earlier.pk} to {what}."


@pytest.mark.parametrize(("waits_for", "want"), [
    ([(7, "afterany"), (7, "singleton")], "Waiting for job #7 to end."),
    ([(7, "afterany"), (9, "afterok"), (7, "singleton")],
     "Waiting for job #9 to succeed and job #7 to end."),
    ([(9, "afterany"), (7, "singleton")],
     "Waiting for job #9 to end and job #7 to end (singleton)."),
])  # fmt: skip
def test_the_sentence_names_each_job_once(waits_for, want):
    assert sentence(waits_for) == want


OTHERS = [
    # (case, who submits the earlier job and where, its name)
    ("another name", "alice", "alpha", "train"),
    ("another submitter of the team", "bob", "alpha", NAME),
    ("another tenant", "charlie", "gamma", NAME),
]


@pytest.mark.parametrize(("case", "who", "where", "name"), OTHERS, ids=[c[0] for c in OTHERS])
def test_a_singleton_job_does_not_wait_for_jobs_outside_its_group(
    request, alice, alpha, case, who, where, name
):
    other = submit(request.getfixturevalue(who), request.getfixturevalue(where), name=name)
    mine = singleton(alice, alpha)

    assert sorted(cycle.run_cycle().placed) == [other.pk, mine.pk]


def test_a_singleton_job_does_not_wait_for_later_jobs_of_its_name(alice, alpha):
    mine = singleton(alice, alpha)
    later = submit(alice, alpha, name=NAME)

    assert sorted(cycle.run_cycle().placed) == [mine.pk, later.pk]


def test_a_held_earlier_job_keeps_a_singleton_job_waiting(alice, alpha):
    earlier = submit(alice, alpha, name=NAME)
    actions.hold(earlier, "alice")
    later = singleton(alice, alpha)

    assert cycle.run_cycle().placed == []
    assert explained(later)[1] == f"Waiting for job #{earlier.pk} to end (singleton)."
    actions.release_hold(earlier, "alice")
    assert cycle.run_cycle().placed == [earlier.pk]


def test_an_earlier_job_requeued_for_a_retry_keeps_a_singleton_job_waiting(alice, alpha):
    earlier = submit(alice, alpha, name=NAME)
    later = singleton(alice, alpha)
    cycle.run_cycle()
    actions.end_attempt(earlier.attempts.get().pk, Outcome.LOST, reason="node lost")
    Job.objects.filter(pk=earlier.pk).update(not_before=None)  # its backoff has passed

    assert cycle.run_cycle().placed == [earlier.pk]
    assert state(later) == State.QUEUED


# -- batches: one job of the group ---------------------------------------------------------------


def test_a_singleton_batch_waits_as_one_job_then_runs_its_shards_side_by_side(alice, alpha):
    earlier = submit(alice, alpha, name=NAME)
    shards = list(singleton(alice, alpha, family=Family.BATCH_INFERENCE, shards=3).batch())

    assert cycle.run_cycle().placed == [earlier.pk]
    assert {explained(s)[1] for s in shards} == {
        f"Waiting for job #{earlier.pk} to end (singleton)."
    }
    finish(earlier, State.SUCCEEDED)

    assert sorted(cycle.run_cycle().placed) == [s.pk for s in shards]


def test_a_later_singleton_job_waits_for_every_shard_of_an_earlier_batch(alice, alpha):
    shards = list(submit(alice, alpha, name=NAME, family=Family.BATCH_INFERENCE, shards=3).batch())
    later = singleton(alice, alpha)
    cycle.run_cycle()

    for shard in shards[:2]:
        finish(shard, State.SUCCEEDED)
    assert cycle.run_cycle().placed == []
    assert explained(later)[1] == f"Waiting for job #{shards[0].pk} to end (singleton)."
    finish(shards[2], State.FAILED)

    assert cycle.run_cycle().placed == [later.pk]


# -- the snapshot --------------------------------------------------------------------------------


def test_the_snapshot_offers_the_core_no_singleton_job_whose_group_has_an_earlier_live_job(
    alice, alpha
):
    earlier = submit(alice, alpha, name=NAME)
    later = singleton(alice, alpha)

    loaded = snapshot.load(timezone.now().timestamp())

    assert [q.id for q in loaded.snapshot.queued] == [str(earlier.pk)]
    assert loaded.waiting == {later.pk: [(earlier.pk, "singleton")]}


def test_the_snapshot_costs_the_same_queries_for_one_waiting_singleton_as_for_thirty(alice, alpha):
    submit(alice, alpha, name=NAME)
    singleton(alice, alpha)
    with CaptureQueriesContext(connection) as one:
        snapshot.load(timezone.now().timestamp())
    for _ in range(29):
        singleton(alice, alpha)

    with CaptureQueriesContext(connection) as thirty:
        loaded = snapshot.load(timezone.now().timestamp())

    assert len(loaded.waiting) == 30
    assert len(thirty) == len(one)


def test_the_snapshots_singleton_filter_probes_the_index_of_live_jobs_by_name(alice, alpha):
    submit(alice, alpha, name=NAME)
    singleton(alice, alpha)
    queued = snapshot.queued_jobs(timezone.now().timestamp())
    sql, params = queued.query.sql_with_params()

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a handful of rows: force the probe
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "job_live_by_name" in plan


# -- submitting ----------------------------------------------------------------------------------


def test_the_api_takes_singleton_and_shows_it(alice, alpha):
    earlier = api(alice).post("/api/v1/jobs/", {**API_SPEC, "name": NAME}, format="json")

    created = api(alice).post(
        "/api/v1/jobs/", {**API_SPEC, "name": NAME, "singleton": True}, format="json"
    )

    assert created.status_code == 201, created.json()
    assert created.json()["singleton"] is True
    assert earlier.json()["singleton"] is False
    assert cycle.run_cycle().placed == [earlier.json()["id"]]


def test_a_bad_singleton_is_a_400_naming_it(alice, alpha):
    response = api(alice).post(
        "/api/v1/jobs/", {**API_SPEC, "singleton": "sometimes"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {"singleton": ["Must be a valid boolean."]}


def test_a_resubmitted_singleton_job_is_a_singleton_queued_after_the_earlier_ones(alice, alpha):
    done = singleton(alice, alpha)
    cycle.run_cycle()
    finish(done, State.CANCELED)
    running = submit(alice, alpha, name=NAME)
    cycle.run_cycle()

    again, _ = actions.resubmit(alice, Job.objects.get(pk=done.pk))

    assert again.singleton
    assert cycle.run_cycle().placed == []
    assert explained(again)[1] == f"Waiting for job #{running.pk} to end (singleton)."


def test_the_submit_form_takes_singleton_beside_the_jobs_to_wait_for(client, alice, alpha):
    first = submit(alice, alpha)
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, "depends_on": f"afterany:{first.pk}, singleton"})

    job = Job.objects.latest("pk")
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.singleton
    assert list(job.dependency_links.values_list("on_id", "kind")) == [(first.pk, "afterany")]


WRITTEN = [
    # (what is written, the depends_on items, singleton)
    ("singleton", [], True),
    ("afterok:12,singleton", [{"id": 12, "kind": "afterok"}], True),
    ("singleton 12", [12], True),
    ("afterany:12,singleton,13", [{"id": 12, "kind": "afterany"}, {"id": 13, "kind": "afterany"}],
     True),
    ("12,13", [12, 13], False),
    ("Singleton", ["Singleton"], False),
    ("", [], False),
    ("none", [], False),
    (" none ", [], False),
    ("none,12", ["none", 12], False),
]  # fmt: skip


@pytest.mark.parametrize(("text", "items", "says_singleton"), WRITTEN)
def test_singleton_is_read_among_the_dependencies_as_slurm_writes_it(text, items, says_singleton):
    assert dependencies_written(text) == (items, says_singleton)


# -- races -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_singleton_jobs_submitted_at_once_never_run_side_by_side(alice, alpha, monkeypatch):
    # The first submission stops once its job is written, before it commits: its id is the
    # lower, and a second submission may commit first.
    go, written, publish = threading.Event(), threading.Event(), events.publish_on_commit

    def write_then_wait(*args):
        publish(*args)
        if not written.is_set():
            written.set()
            assert go.wait(10)

    monkeypatch.setattr(events, "publish_on_commit", write_then_wait)
    submitting = functools.partial(singleton, alice, alpha)
    first, firsts = in_a_thread(submitting)
    assert written.wait(10)
    second, seconds = in_a_thread(submitting)
    try:
        assert wait_until(lambda: waiting_on_a_lock("pg_advisory") or not second.is_alive(), 10)
        placed_meanwhile = cycle.run_cycle().placed
    finally:
        go.set()
        for thread in (first, second):
            thread.join(10)
    placed_after = cycle.run_cycle().placed

    assert firsts[0].pk < seconds[0].pk
    assert placed_meanwhile + placed_after == [firsts[0].pk]
    assert state(seconds[0]) == State.QUEUED


def test_the_job_page_says_a_job_is_a_singleton_and_of_which_group(client, alice, alpha):
    plain, one = submit(alice, alpha, name=NAME), singleton(alice, alpha)
    client.force_login(alice)

    shown = client.get(f"/jobs/{one.pk}/").content.decode()
    not_shown = client.get(f"/jobs/{plain.pk}/").content.decode()

    assert f"starts once every earlier job named “{NAME}” that alice submitted to" in shown
    assert 'id="singleton"' not in not_shown
