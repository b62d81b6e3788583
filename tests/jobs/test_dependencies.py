"""Job dependencies (afterok): a job waits until every job it depends on has succeeded (a batch:
every shard), and is canceled with any of them that fails or is canceled."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.exceptions import ValidationError
from rest_framework.test import APIClient

from jobs import actions, cycle, dependencies, retention, snapshot
from jobs.models import Attempt, Dependency, Family, Job, JobEvent
from jobs.states import State
from tests.factories import NodeFactory, PriorityClassFactory, UserFactory
from tests.jobs.test_lock_order import commit_once_waited_on, other_connection
from tests.processes import wait_until, waiting_on_a_lock

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("normal_priority")]
Outcome = Attempt.Outcome

SPEC = {"name": "step", "family": Family.TRAINING, "image": "pytorch:2", "command": ["python"],
        "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 600}  # fmt: skip
API_SPEC = {**SPEC, "tenant": "alpha"}


def submit(owner, tenant, *depends_on, **spec) -> Job:
    fields = {**SPEC, "priority_class": PriorityClassFactory(name="normal"), **spec}
    waits = [dependencies.Wait(j.pk, "afterok") for j in depends_on]
    job, _ = actions.submit(owner, tenant, {**fields, "depends_on": waits})
    return job


def batch(owner, tenant, shards: int, *depends_on) -> Job:
    return submit(owner, tenant, *depends_on, family=Family.BATCH_INFERENCE, shards=shards)


def end(job: Job, outcome: str = Outcome.SUCCEEDED) -> None:
    """End the job's live attempt as the agent reports it."""
    actions.end_attempt(job.attempts.get(outcome="").pk, outcome, exit_code=0, reason="done")


def state(job: Job) -> str:
    return Job.objects.get(pk=job.pk).state


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# -- waiting, then placed ------------------------------------------------------------------


def test_a_chain_is_placed_in_order_each_job_waiting_with_the_reason_until_the_one_before_succeeds(
    alice, alpha, room
):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    report = submit(alice, alpha, evaluate)

    assert cycle.run_cycle().placed == [train.pk]
    waiting = Job.objects.get(pk=evaluate.pk)
    assert (waiting.state, waiting.pending_reason) == (State.QUEUED, "waiting_for_dependency")
    assert waiting.pending_message == f"Waiting for job #{train.pk} to succeed."
    assert Job.objects.get(pk=report.pk).pending_message == (
        f"Waiting for job #{evaluate.pk} to succeed."
    )

    end(train)
    assert cycle.run_cycle().placed == [evaluate.pk]
    end(evaluate)
    assert cycle.run_cycle().placed == [report.pk]
    assert Job.objects.get(pk=report.pk).pending_reason == ""


def test_a_job_waits_until_every_one_of_its_dependencies_succeeded_and_names_those_left(
    alice, alpha, room
):
    first, second = submit(alice, alpha), submit(alice, alpha)
    merge = submit(alice, alpha, second, first)
    cycle.run_cycle()
    assert Job.objects.get(pk=merge.pk).pending_message == (
        f"Waiting for jobs #{first.pk}, #{second.pk} to succeed."
    )

    end(first)
    cycle.run_cycle()

    assert state(merge) == State.QUEUED
    assert Job.objects.get(pk=merge.pk).pending_message == (
        f"Waiting for job #{second.pk} to succeed."
    )
    end(second)
    assert cycle.run_cycle().placed == [merge.pk]


def test_a_dependency_that_already_succeeded_is_met_at_once(alice, alpha, room):
    done = submit(alice, alpha)
    cycle.run_cycle()
    end(done)

    after = submit(alice, alpha, done)

    assert cycle.run_cycle().placed == [after.pk]


def test_a_job_depending_on_a_batch_waits_for_every_shard_to_succeed(alice, alpha, room):
    shards = list(batch(alice, alpha, 3).batch())
    merge = submit(alice, alpha, shards[0])
    cycle.run_cycle()

    for shard in shards[:2]:
        end(shard)
    assert cycle.run_cycle().placed == []
    assert Job.objects.get(pk=merge.pk).pending_reason == "waiting_for_dependency"

    end(shards[2])
    assert cycle.run_cycle().placed == [merge.pk]


def test_a_batch_that_depends_on_a_job_waits_with_every_shard(alice, alpha, room):
    train = submit(alice, alpha)
    shards = list(batch(alice, alpha, 3, train).batch())

    cycle.run_cycle()

    waiting = Job.objects.filter(pk__in=[s.pk for s in shards])
    assert set(waiting.values_list("state", "pending_reason")) == {
        (State.QUEUED, "waiting_for_dependency")
    }
    end(train)
    assert sorted(cycle.run_cycle().placed) == [s.pk for s in shards]


def test_the_snapshot_offers_the_core_no_waiting_job_and_explains_each(alice, alpha):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)

    loaded = snapshot.load(timezone.now().timestamp())

    assert [q.id for q in loaded.snapshot.queued] == [str(train.pk)]
    assert loaded.waiting == {evaluate.pk: [(train.pk, "afterok")]}


def test_the_snapshot_costs_the_same_queries_for_one_waiting_job_as_for_thirty(alice, alpha):
    train = submit(alice, alpha)
    submit(alice, alpha, train)
    with CaptureQueriesContext(connection) as one:
        snapshot.load(timezone.now().timestamp())
    for _ in range(9):
        submit(alice, alpha, train)
    batch(alice, alpha, 20, train)

    with CaptureQueriesContext(connection) as thirty:
        loaded = snapshot.load(timezone.now().timestamp())

    assert len(loaded.waiting) == 30
    assert len(thirty) == len(one)


def test_the_sentence_names_the_first_ten_jobs_and_counts_the_rest():
    assert dependencies.sentence([(pk, "afterok") for pk in range(1, 13)]) == (
        "Waiting for jobs #1, #2, #3, #4, #5, #6, #7, #8, #9, #10 and 2 more to succeed."
    )


# -- cut off: canceled with a dependency that failed or was canceled ----------------------


def test_a_failure_cancels_its_dependents_and_theirs_in_the_same_transaction(alice, alpha, room):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    report = submit(alice, alpha, evaluate)
    cycle.run_cycle()

    end(train, Outcome.USER_ERROR)

    assert [state(j) for j in (train, evaluate, report)] == [State.FAILED, State.CANCELED,
                                                             State.CANCELED]  # fmt: skip
    assert JobEvent.objects.get(job=evaluate, to_state=State.CANCELED).reason == (
        f"dependency {train.pk} failed"
    )
    assert JobEvent.objects.get(job=report, to_state=State.CANCELED).reason == (
        f"dependency {evaluate.pk} was canceled"
    )


def test_a_cancel_cancels_its_dependents_transitively(alice, alpha):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    report = submit(alice, alpha, evaluate)
    unrelated = submit(alice, alpha)

    actions.cancel(train, "canceled by alice")

    assert [state(j) for j in (evaluate, report, unrelated)] == [State.CANCELED, State.CANCELED,
                                                                 State.QUEUED]  # fmt: skip
    assert JobEvent.objects.get(job=evaluate, to_state=State.CANCELED).reason == (
        f"dependency {train.pk} was canceled"
    )


def test_a_failure_that_is_retried_cancels_nothing(alice, alpha, room):
    train = submit(alice, alpha, max_retries=1)
    evaluate = submit(alice, alpha, train)
    cycle.run_cycle()

    end(train, Outcome.INFRA_ERROR)

    assert (state(train), state(evaluate)) == (State.QUEUED, State.QUEUED)


def test_one_failed_shard_cancels_the_batchs_dependents(alice, alpha, room):
    shards = list(batch(alice, alpha, 3).batch())
    merge = submit(alice, alpha, shards[0])
    cycle.run_cycle()
    end(shards[0])

    end(shards[2], Outcome.USER_ERROR)

    assert state(merge) == State.CANCELED
    assert JobEvent.objects.get(job=merge, to_state=State.CANCELED).reason == (
        f"dependency {shards[0].pk} failed"
    )
    assert state(shards[1]) == State.SCHEDULED  # the batch's own shards go on


def test_a_batch_that_depends_on_a_failed_job_is_canceled_whole(alice, alpha, room):
    train = submit(alice, alpha)
    shards = list(batch(alice, alpha, 4, train).batch())
    cycle.run_cycle()

    end(train, Outcome.TIMEOUT)

    assert {state(s) for s in shards} == {State.CANCELED}


def test_a_resubmitted_dependency_does_not_revive_its_canceled_dependent(alice, alpha, room):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    cycle.run_cycle()
    end(train, Outcome.USER_ERROR)

    again, _ = actions.resubmit(alice, Job.objects.get(pk=train.pk))
    cycle.run_cycle()
    end(again)
    cycle.run_cycle()

    assert state(evaluate) == State.CANCELED
    assert not Job.objects.filter(resubmitted_from=evaluate).exists()


def test_a_resubmitted_dependent_waits_for_the_same_jobs(alice, alpha, room):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    cycle.run_cycle()
    end(train)
    cycle.run_cycle()
    end(evaluate)

    again, _ = actions.resubmit(alice, Job.objects.get(pk=evaluate.pk))

    assert list(again.depends_on.values_list("pk", flat=True)) == [train.pk]
    assert cycle.run_cycle().placed == [again.pk]  # met: the training succeeded


def test_a_dependent_whose_dependency_failed_cannot_be_resubmitted_naming_depends_on(alice, alpha):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    actions.cancel(train, "canceled by alice")

    response = api(alice).post(f"/api/v1/jobs/{evaluate.pk}/resubmit/", format="json")

    assert response.status_code == 400
    assert response.json() == {"depends_on": [
        f"Job #{train.pk} was canceled: a job that depends on it would never run."
    ]}  # fmt: skip


# -- submitting ------------------------------------------------------------------------------


def test_the_api_takes_depends_on_and_lists_it(alice, alpha):
    first, second = submit(alice, alpha), submit(alice, alpha)

    created = api(alice).post(
        "/api/v1/jobs/", {**API_SPEC, "depends_on": [second.pk, first.pk]}, format="json"
    )

    assert created.status_code == 201
    assert created.json()["depends_on"] == [first.pk, second.pk]
    shown = api(alice).get(f"/api/v1/jobs/{created.json()['id']}/").json()
    assert shown["depends_on"] == [first.pk, second.pk]
    listed = api(alice).get("/api/v1/jobs/").json()["jobs"]
    assert [job["depends_on"] for job in listed] == [[first.pk, second.pk], [], []]


REFUSED = [
    # (case, depends_on as names of `jobs` or raw values, the error wanted)
    ("not an id", ["x"], {"0": ["A valid integer is required."]}),
    ("no such job", ["missing"], ["No job #{missing} you can see."]),
    ("another tenant's", ["charlies"], ["No job #{charlies} you can see."]),
    ("named twice", ["mine", "mine"], ["Job #{mine} is named twice."]),
    ("too many", ["mine"] * 65, ["Ensure this field has no more than 64 elements."]),
    ("a shard", ["shard"], ["Job #{shard} is shard 1 of batch #{batch}: depend on the batch, "
                            "#{batch}, which waits for every shard."]),
    ("failed", ["mine", "failed"],
     ["Job #{failed} failed: a job that depends on it would never run."]),
    ("canceled", ["canceled"],
     ["Job #{canceled} was canceled: a job that depends on it would never run."]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "names", "want"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_bad_depends_on_is_a_400_naming_it_and_writes_nothing(alice, jobs, case, names, want):
    ids = {name: job.pk for name, job in jobs.items()}
    before = (Job.objects.count(), Dependency.objects.count(), JobEvent.objects.count())

    depends_on = [ids.get(name, name) for name in names]
    response = api(alice).post("/api/v1/jobs/", {**API_SPEC, "depends_on": depends_on,
                                                 "shards": 4, "family": "batch_inference"},
                               format="json")  # fmt: skip

    assert response.status_code == 400
    wanted = [m.format(**ids) for m in want] if isinstance(want, list) else want
    assert response.json() == {"depends_on": wanted}
    assert (Job.objects.count(), Dependency.objects.count(), JobEvent.objects.count()) == before


def test_another_tenants_job_is_answered_exactly_as_one_that_does_not_exist(alice, jobs):
    def error_for(job_id: int) -> str:
        response = api(alice).post("/api/v1/jobs/", {**API_SPEC, "depends_on": [job_id]},
                                   format="json")  # fmt: skip
        return response.json()["depends_on"][0].replace(str(job_id), "ID")

    assert error_for(jobs["charlies"].pk) == error_for(10**9)


def test_a_visible_job_of_another_tenant_is_refused_saying_so(alice, jobs):
    assign_perm("jobs.view_job", alice, jobs["charlies"])

    response = api(alice).post(
        "/api/v1/jobs/", {**API_SPEC, "depends_on": [jobs["charlies"].pk]}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["depends_on"] == [
        f"Job #{jobs['charlies'].pk} is not in tenant 'alpha': a job waits only for jobs of its "
        "own tenant."
    ]


# -- races: a dependency's end and a submission naming it ---------------------------------


def in_a_thread(fn, *args) -> tuple[threading.Thread, list]:
    outcome = []

    def run():
        try:
            outcome.append(fn(*args))
        except Exception as error:  # noqa: BLE001 - handed to the test to assert on
            outcome.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def paused_after_hold(monkeypatch) -> threading.Event:
    """Submissions stop once they hold their dependencies' locks, until the event is set."""
    go, hold = threading.Event(), dependencies.hold

    def hold_then_wait(ids):
        hold(ids)
        assert go.wait(10)

    monkeypatch.setattr(dependencies, "hold", hold_then_wait)
    return go


def locked_elsewhere(job) -> bool:
    """Another session holds the job's row lock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE SKIP LOCKED", [job.pk])
        return cursor.fetchone() is None


def beside_a_cancel_in_flight(canceled, verb, *args):
    """Run verb(*args) in a thread while another session's cancel of `canceled` has moved the
    job and not yet committed; commit it once the verb waits for a lock. Returns what the verb
    returned (or raised)."""
    canceling = other_connection()
    canceling.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [canceled.pk])
    canceling.execute("UPDATE jobs_job SET state = 'canceled' WHERE id = %s", [canceled.pk])
    running, outcome = in_a_thread(verb, *args)
    commit_once_waited_on(canceling, running, "jobs_job")
    return outcome[0]


def submitted_while_failing(monkeypatch, owner, tenant, on, failing_job) -> Job:
    """Submit a job depending on `on`; once the submission holds its dependency's lock, fail
    `failing_job` (its code's error) and let the submission go once the failure waits for a
    lock. Returns the job submitted."""
    go = paused_after_hold(monkeypatch)
    submitting, submitted = in_a_thread(submit, owner, tenant, on)
    assert wait_until(lambda: locked_elsewhere(on), 10)
    failing, _ = in_a_thread(end, failing_job, Outcome.USER_ERROR)
    assert wait_until(lambda: waiting_on_a_lock("jobs_job"), 10)
    go.set()
    for thread in (submitting, failing):
        thread.join(10)
    return submitted[0]


@pytest.mark.django_db(transaction=True)
def test_a_submission_waits_for_its_dependencys_cancel_in_flight_then_is_refused(alice, alpha):
    train = submit(alice, alpha)

    outcome = beside_a_cancel_in_flight(train, submit, alice, alpha, train)

    assert isinstance(outcome, ValidationError)
    assert list(Job.objects.values_list("pk", flat=True)) == [train.pk]


@pytest.mark.django_db(transaction=True)
def test_a_failure_waits_for_a_submission_in_flight_that_depends_on_it_and_cancels_it(
    alice, alpha, monkeypatch
):
    NodeFactory(gpu_count=8)
    train = submit(alice, alpha)
    cycle.run_cycle()
    evaluate = submitted_while_failing(monkeypatch, alice, alpha, train, train)
    assert (state(train), state(evaluate)) == (State.FAILED, State.CANCELED)


@pytest.mark.django_db(transaction=True)
def test_a_cascade_finds_a_dependent_submitted_while_it_waited_for_a_lock_further_down(
    alice, alpha, monkeypatch
):
    NodeFactory(gpu_count=8)
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    cycle.run_cycle()
    # The submission holds evaluate; the cascade reads evaluate as the only dependent, then
    # waits for its lock.
    report = submitted_while_failing(monkeypatch, alice, alpha, evaluate, train)
    assert [state(j) for j in (train, evaluate, report)] == [State.FAILED, State.CANCELED,
                                                             State.CANCELED]  # fmt: skip
    assert JobEvent.objects.get(job=report, to_state=State.CANCELED).reason == (
        f"dependency {evaluate.pk} was canceled"
    )


@pytest.mark.django_db(transaction=True)
def test_a_cascade_waits_for_a_dependents_cancel_in_flight_and_does_not_cancel_it_twice(
    alice, alpha
):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    report = submit(alice, alpha, evaluate)

    outcome = beside_a_cancel_in_flight(evaluate, actions.cancel, train, "canceled by alice")

    assert isinstance(outcome, JobEvent)
    assert not JobEvent.objects.filter(job=evaluate, to_state=State.CANCELED).exists()
    assert JobEvent.objects.get(job=report, to_state=State.CANCELED).reason == (
        f"dependency {evaluate.pk} was canceled"
    )


# -- retention -------------------------------------------------------------------------------


def test_retention_prunes_a_dependency_before_its_dependent(alice, alpha, room):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, train)
    cycle.run_cycle()
    end(train)
    cycle.run_cycle()
    long_ago = timezone.now() - timedelta(days=100)
    Job.objects.filter(pk=train.pk).update(created=long_ago, finished_at=long_ago)
    Attempt.objects.filter(job=train).update(ended_at=long_ago)

    counts = retention.prune(timezone.now(), keep_days=30, job_days=90)

    assert counts["jobs"] == 1
    assert not Job.objects.filter(pk=train.pk).exists()
    assert state(evaluate) == State.SCHEDULED
    assert list(Job.objects.get(pk=evaluate.pk).depends_on.all()) == []


# -- the portal --------------------------------------------------------------------------------

FORM = {"tenant": "alpha", "name": "eval", "family": "evaluation", "image": "python:3.11",
        "command": "python eval.py", "cpu_milli": "1000", "memory_mb": "1000", "gpus": "1",
        "gpu_milli": "0", "workers": "1", "shards": "1", "priority_class": "normal",
        "priority": "0", "max_runtime_s": "600", "max_retries": "3"}  # fmt: skip


def test_the_submit_form_takes_the_job_ids_to_wait_for(client, alice, alpha):
    first, second = submit(alice, alpha), submit(alice, alpha)
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, "depends_on": f"#{first.pk}, {second.pk}"})

    job = Job.objects.latest("pk")
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert sorted(job.depends_on.values_list("pk", flat=True)) == [first.pk, second.pk]


def test_the_submit_form_shows_a_refused_dependency_on_its_field_and_writes_nothing(
    client, alice, alpha
):
    train = submit(alice, alpha)
    actions.cancel(train, "canceled by alice")
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, "depends_on": str(train.pk)})

    assert response.status_code == 400
    assert (
        f'<span class="error" data-field="depends_on">Job #{train.pk} was canceled: a job that '
        "depends on it would never run.</span>"
    ) in response.text
    assert Job.objects.count() == 1


def test_the_job_page_links_each_dependency_with_its_state(client, alice, alpha, room):
    train = submit(alice, alpha, name="train-llama")
    shards = list(batch(alice, alpha, 2).batch())
    evaluate = submit(alice, alpha, train, shards[0])
    cycle.run_cycle()
    end(shards[0])
    client.force_login(alice)

    page = client.get(f"/jobs/{evaluate.pk}/").text

    assert f'<a href="/jobs/{train.pk}/">#{train.pk} train-llama</a>' in page
    assert '<span class="badge state-scheduled">scheduled</span>' in page
    assert f'<a href="/jobs/{shards[0].pk}/">' in page
    assert "batch of 2: 1 scheduled, 1 succeeded" in page


def test_the_job_page_costs_the_same_queries_for_one_batch_dependency_as_for_three(
    client, alice, alpha
):
    client.force_login(alice)

    def page_queries(batches: int) -> int:
        waits = submit(alice, alpha, *(batch(alice, alpha, 2) for _ in range(batches)))
        with CaptureQueriesContext(connection) as seen:
            assert client.get(f"/jobs/{waits.pk}/").status_code == 200
        return len(seen)

    assert page_queries(3) == page_queries(1)


def test_the_admins_job_page_shows_the_dependencies(client, alice, alpha):
    train = submit(alice, alpha, name="train-llama")
    evaluate = submit(alice, alpha, train)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    page = client.get(f"/admin/jobs/job/{evaluate.pk}/change/")

    assert page.status_code == 200
    assert f"train-llama (#{train.pk})" in page.text
