"""Slurm's dependency kinds: afterok waits for a job to succeed, afterany for it to end in any
way, afternotok for it to fail or be canceled (a batch: every shard ended, at least one not
succeeded). A dependency that ends the other way cuts its dependent off: it is canceled, and so
are the jobs waiting for that one to succeed. The job page lists the jobs waiting for a job."""

import json
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from guardian.shortcuts import assign_perm

from jobs import actions, cycle, dependencies, snapshot
from jobs.cli import dependency_items
from jobs.models import Attempt, Dependency, Family, Job, JobEvent
from jobs.states import State
from tests.factories import PriorityClassFactory
from tests.jobs.test_cli import SPEC as CLI_SPEC
from tests.jobs.test_cli import cli  # noqa: F401 - the fixture, for the command line's test
from tests.jobs.test_dependencies import API_SPEC, FORM, SPEC, api, end, state
from tests.processes import wait_until, waiting_on_a_lock

# Room for every job of a test at once: only a dependency keeps one from being placed.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("normal_priority", "room")]
Outcome = Attempt.Outcome
OK, ANY, NOTOK = "afterok", "afterany", "afternotok"


def submit(owner, tenant, *waits: tuple[Job, str], **spec) -> Job:
    """A job waiting for each (job, kind) of `waits`."""
    fields = {**SPEC, "priority_class": PriorityClassFactory(name="normal"), **spec}
    depends_on = [dependencies.Wait(job.pk, kind) for job, kind in waits]
    job, _ = actions.submit(owner, tenant, {**fields, "depends_on": depends_on})
    return job


def batch(owner, tenant, shards: int, *waits: tuple[Job, str]) -> list[Job]:
    """A batch's shards, its first (which stands for it) first."""
    first = submit(owner, tenant, *waits, family=Family.BATCH_INFERENCE, shards=shards)
    return list(first.batch())


def finish(job: Job, how: str) -> None:
    """End a placed job: succeeded, failed (its own code's error) or canceled."""
    if how == State.CANCELED:
        actions.cancel(job, "canceled by alice")
    else:
        end(job, Outcome.SUCCEEDED if how == State.SUCCEEDED else Outcome.USER_ERROR)


def canceled_because(job: Job) -> str:
    return JobEvent.objects.get(job=job, to_state=State.CANCELED).reason


# -- met: each kind once its dependency has ended as it asks --------------------------------

MET = [
    # (kind, how the dependency ends, the sentence's verb while it runs)
    (OK, State.SUCCEEDED, "succeed"),
    (ANY, State.SUCCEEDED, "end"),
    (ANY, State.FAILED, "end"),
    (ANY, State.CANCELED, "end"),
    (NOTOK, State.FAILED, "fail"),
    (NOTOK, State.CANCELED, "fail"),
]


@pytest.mark.parametrize(("kind", "how", "verb"), MET, ids=[f"{k}-{h}" for k, h, _ in MET])
def test_a_dependent_waits_until_its_dependency_ends_as_its_kind_asks_then_is_placed(
    alice, alpha, kind, how, verb
):
    train = submit(alice, alpha)
    after = submit(alice, alpha, (train, kind))
    assert cycle.run_cycle().placed == [train.pk]
    waiting = Job.objects.get(pk=after.pk)
    assert (waiting.pending_reason, waiting.pending_message) == (
        "waiting_for_dependency", f"Waiting for job #{train.pk} to {verb}."
    )  # fmt: skip

    finish(train, how)

    assert cycle.run_cycle().placed == [after.pk]


@pytest.mark.parametrize("kind", [ANY, NOTOK])
def test_a_dependent_that_waits_for_an_end_is_not_placed_while_its_dependency_runs(
    alice, alpha, kind
):
    train = submit(alice, alpha)
    after = submit(alice, alpha, (train, kind))
    cycle.run_cycle()
    actions.mark_running(train.attempts.get().pk)

    assert cycle.run_cycle().placed == []
    assert state(after) == State.QUEUED


def test_a_job_of_mixed_kinds_waits_for_every_one_and_names_what_it_waits_for(alice, alpha):
    train, probe, flaky = submit(alice, alpha), submit(alice, alpha), submit(alice, alpha)
    report = submit(alice, alpha, (flaky, NOTOK), (train, OK), (probe, ANY))
    cycle.run_cycle()
    assert Job.objects.get(pk=report.pk).pending_message == (
        f"Waiting for job #{train.pk} to succeed, job #{probe.pk} to end and job #{flaky.pk} "
        "to fail."
    )

    finish(train, State.SUCCEEDED)
    finish(probe, State.FAILED)
    cycle.run_cycle()
    assert Job.objects.get(pk=report.pk).pending_message == (
        f"Waiting for job #{flaky.pk} to fail."
    )
    finish(flaky, State.FAILED)

    assert cycle.run_cycle().placed == [report.pk]


SENTENCES = [
    # (waits, the sentence)
    ([(12, OK)], "Waiting for job #12 to succeed."),
    ([(12, ANY)], "Waiting for job #12 to end."),
    ([(12, NOTOK)], "Waiting for job #12 to fail."),
    ([(12, OK), (15, ANY), (14, ANY)], "Waiting for job #12 to succeed and jobs #14, #15 to end."),
    ([(3, NOTOK), (1, OK), (2, ANY)],
     "Waiting for job #1 to succeed, job #2 to end and job #3 to fail."),
    ([*((pk, OK) for pk in range(1, 12)), (20, ANY), (21, NOTOK), (22, NOTOK)],
     "Waiting for jobs #1, #2, #3, #4, #5, #6, #7, #8, #9, #10 and 1 more to succeed, 1 more "
     "job to end and 2 more jobs to fail."),
    ([*((pk, ANY) for pk in range(1, 10)), (10, NOTOK), (11, NOTOK)],
     "Waiting for jobs #1, #2, #3, #4, #5, #6, #7, #8, #9 to end and jobs #10 and 1 more to "
     "fail."),
]  # fmt: skip


@pytest.mark.parametrize(("waits", "want"), SENTENCES)
def test_the_sentence_says_what_each_dependency_is_waited_for_naming_the_first_ten(waits, want):
    assert dependencies.sentence(waits) == want


def test_the_snapshot_costs_the_same_queries_for_one_waiting_job_as_for_thirty_of_every_kind(
    alice, alpha
):
    train = submit(alice, alpha)
    submit(alice, alpha, (train, NOTOK))
    with CaptureQueriesContext(connection) as one:
        snapshot.load(timezone.now().timestamp())
    for kind in (OK, ANY, NOTOK) * 3:
        submit(alice, alpha, (train, kind))
    batch(alice, alpha, 20, (train, ANY))

    with CaptureQueriesContext(connection) as thirty:
        loaded = snapshot.load(timezone.now().timestamp())

    assert len(loaded.waiting) == 30
    assert [q.id for q in loaded.snapshot.queued] == [str(train.pk)]
    assert len(thirty) == len(one)


@pytest.mark.parametrize("shards", [1, 3])
def test_a_job_waiting_for_a_failure_of_one_that_succeeded_is_never_offered_to_the_core(
    alice, alpha, shards
):
    done = batch(alice, alpha, shards)
    cycle.run_cycle()
    for shard in done:
        finish(shard, State.SUCCEEDED)
    # Written past submit's checks: the dependent a success would have canceled, had it been
    # there.
    alert = submit(alice, alpha)
    Dependency.objects.create(job=alert, on=done[0], kind=NOTOK)

    loaded = snapshot.load(timezone.now().timestamp())

    assert loaded.snapshot.queued == ()
    assert loaded.waiting == {alert.pk: [(done[0].pk, NOTOK)]}


# -- cut off: canceled once the dependency has ended the other way ---------------------------


CUTS = [
    # (how the dependency ends, the kind of link it cuts off, the reason's verb)
    (State.SUCCEEDED, NOTOK, "succeeded"),
    (State.FAILED, OK, "failed"),
    (State.CANCELED, OK, "was canceled"),
]


@pytest.mark.parametrize(("how", "cut", "verb"), CUTS, ids=[c[0] for c in CUTS])
def test_an_end_cancels_the_jobs_it_leaves_never_to_run_and_those_waiting_for_their_success(
    alice, alpha, how, cut, verb
):
    train = submit(alice, alpha)
    waiting = {kind: submit(alice, alpha, (train, kind)) for kind in (OK, ANY, NOTOK)}
    after = {kind: submit(alice, alpha, (job, OK)) for kind, job in waiting.items()}
    cycle.run_cycle()

    finish(train, how)

    assert [kind for kind, job in waiting.items() if state(job) == State.CANCELED] == [cut]
    assert canceled_because(waiting[cut]) == f"dependency {train.pk} {verb}"
    assert canceled_because(after[cut]) == f"dependency {waiting[cut].pk} was canceled"
    others = sorted(job.pk for kind, job in waiting.items() if kind != cut)
    assert sorted(cycle.run_cycle().placed) == others


def test_a_cut_off_cascades_through_mixed_kinds_as_each_link_asks(alice, alpha):
    # train -ok-> evaluate -ok-> report; evaluate -notok-> alert -ok-> page;
    # evaluate -any-> cleanup; report -notok-> retry
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, (train, OK))
    report = submit(alice, alpha, (evaluate, OK))
    alert = submit(alice, alpha, (evaluate, NOTOK))
    page = submit(alice, alpha, (alert, OK))
    cleanup = submit(alice, alpha, (evaluate, ANY))
    retry = submit(alice, alpha, (report, NOTOK))
    cycle.run_cycle()

    finish(train, State.FAILED)

    assert [state(j) for j in (evaluate, report)] == [State.CANCELED, State.CANCELED]
    assert [state(j) for j in (alert, page, cleanup, retry)] == [State.QUEUED] * 4
    assert sorted(cycle.run_cycle().placed) == [alert.pk, cleanup.pk, retry.pk]
    finish(Job.objects.get(pk=alert.pk), State.SUCCEEDED)
    assert cycle.run_cycle().placed == [page.pk]


def test_a_success_cut_off_cascades_down_a_chain_that_waits_for_successes(alice, alpha):
    train = submit(alice, alpha)
    alert = submit(alice, alpha, (train, NOTOK))
    page = submit(alice, alpha, (alert, OK))
    escalate = submit(alice, alpha, (page, OK))
    cycle.run_cycle()

    finish(train, State.SUCCEEDED)

    assert [state(j) for j in (alert, page, escalate)] == [State.CANCELED] * 3
    assert canceled_because(escalate) == f"dependency {page.pk} was canceled"


def test_a_dependency_that_waits_for_any_end_never_cuts_its_dependent_off(alice, alpha):
    train = submit(alice, alpha)
    cleanup = submit(alice, alpha, (train, ANY))
    cycle.run_cycle()

    finish(train, State.FAILED)

    assert state(cleanup) == State.QUEUED
    assert not JobEvent.objects.filter(job=cleanup, to_state=State.CANCELED).exists()


# -- batches: ended when every shard has, ok when every shard succeeded ---------------------

BATCHES = [
    # (kind, how each of the 3 shards ends in turn, placed after the last, canceled at the last)
    (OK, [State.SUCCEEDED] * 3, True, False),
    (ANY, [State.SUCCEEDED, State.FAILED, State.SUCCEEDED], True, False),
    (ANY, [State.SUCCEEDED] * 3, True, False),
    (NOTOK, [State.FAILED, State.SUCCEEDED, State.SUCCEEDED], True, False),
    (NOTOK, [State.SUCCEEDED, State.SUCCEEDED, State.CANCELED], True, False),
    (NOTOK, [State.SUCCEEDED] * 3, False, True),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "ends", "placed", "cut"), BATCHES,
                         ids=[f"{c[0]}-{'-'.join(c[1])}" for c in BATCHES])  # fmt: skip
def test_a_batch_dependency_is_met_or_cuts_off_only_once_every_shard_has_ended(
    alice, alpha, kind, ends, placed, cut
):
    shards = batch(alice, alpha, 3)
    after = submit(alice, alpha, (shards[0], kind))
    cycle.run_cycle()

    for shard, how in zip(shards[:2], ends, strict=False):
        finish(shard, how)
        assert cycle.run_cycle().placed == []
        assert Job.objects.get(pk=after.pk).pending_reason == "waiting_for_dependency"
    finish(shards[2], ends[2])

    assert cycle.run_cycle().placed == ([after.pk] if placed else [])
    assert state(after) == (State.CANCELED if cut else State.SCHEDULED)
    if cut:
        assert canceled_because(after) == f"dependency {shards[0].pk} succeeded"


def test_a_batch_waiting_for_a_failure_is_canceled_whole_when_its_dependency_succeeds(alice, alpha):
    train = submit(alice, alpha)
    shards = batch(alice, alpha, 4, (train, NOTOK))
    cycle.run_cycle()

    finish(train, State.SUCCEEDED)

    assert {state(s) for s in shards} == {State.CANCELED}


@pytest.mark.django_db(transaction=True)
def test_the_last_two_shards_succeeding_at_once_still_cut_off_a_job_waiting_for_a_failure(
    alice, alpha, monkeypatch
):
    shards = batch(alice, alpha, 2)
    alert = submit(alice, alpha, (shards[0], NOTOK))
    cycle.run_cycle()
    # The first success stops once it holds the links, before its transaction commits.
    go, lock_success, calls = threading.Event(), dependencies.lock_success, []

    def lock_then_wait(succeeded):
        held = lock_success(succeeded)
        calls.append(succeeded)
        if len(calls) == 1:
            assert go.wait(10)
        return held

    monkeypatch.setattr(dependencies, "lock_success", lock_then_wait)
    first = threading.Thread(target=ending, args=(shards[0],))
    first.start()
    assert wait_until(lambda: calls, 10)
    second = threading.Thread(target=ending, args=(shards[1],))
    second.start()
    try:
        assert wait_until(lambda: waiting_on_a_lock("jobs_dependency"), 10)
    finally:
        go.set()
        for thread in (first, second):
            thread.join(10)

    assert {state(s) for s in shards} == {State.SUCCEEDED}
    assert state(alert) == State.CANCELED


def ending(job: Job) -> None:
    try:
        end(job)
    finally:
        connection.close()


# -- submitting --------------------------------------------------------------------------------


@pytest.fixture
def ended(alice, alpha):
    """Alice's jobs that have ended each way, and a batch that succeeded whole."""
    succeeded, failed, canceled = submit(alice, alpha), submit(alice, alpha), submit(alice, alpha)
    shards = batch(alice, alpha, 2)
    cycle.run_cycle()
    for job, how in ((succeeded, State.SUCCEEDED), (failed, State.FAILED),
                     (canceled, State.CANCELED), (shards[0], State.SUCCEEDED),
                     (shards[1], State.SUCCEEDED)):  # fmt: skip
        finish(job, how)
    return {"succeeded": succeeded, "failed": failed, "canceled": canceled, "batch": shards[0]}


SUBMITTED = [
    # (kind, the dependency, the error wanted, or "" for a job submitted)
    (OK, "succeeded", ""),
    (OK, "failed", "Job #{failed} failed: a job that depends on it would never run."),
    (OK, "canceled", "Job #{canceled} was canceled: a job that depends on it would never run."),
    (ANY, "succeeded", ""),
    (ANY, "failed", ""),
    (ANY, "canceled", ""),
    (NOTOK, "failed", ""),
    (NOTOK, "canceled", ""),
    (NOTOK, "succeeded",
     "Job #{succeeded} succeeded: a job that waits for it to fail would never run."),
    (NOTOK, "batch",
     "Batch #{batch} (every shard) succeeded: a job that waits for it to fail would never run."),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "name", "want"), SUBMITTED,
                         ids=[f"{k}-{n}" for k, n, _ in SUBMITTED])  # fmt: skip
def test_a_dependency_already_ended_is_refused_only_if_the_dependent_could_never_run(
    alice, ended, kind, name, want
):
    ids = {label: job.pk for label, job in ended.items()}
    before = (Job.objects.count(), Dependency.objects.count())

    response = api(alice).post(
        "/api/v1/jobs/", {**API_SPEC, "depends_on": [{"id": ids[name], "kind": kind}]},
        format="json",
    )  # fmt: skip

    if want:
        assert response.status_code == 400
        assert response.json() == {"depends_on": [want.format(**ids)]}
        assert (Job.objects.count(), Dependency.objects.count()) == before
    else:
        assert response.status_code == 201, response.json()
        assert response.json()["dependencies"] == [{"id": ids[name], "kind": kind}]
        assert cycle.run_cycle().placed == [response.json()["id"]]  # met at once


def test_the_api_takes_ids_and_objects_together_and_shows_the_kinds(alice, alpha):
    first, second, third = submit(alice, alpha), submit(alice, alpha), submit(alice, alpha)

    created = api(alice).post("/api/v1/jobs/", {**API_SPEC, "depends_on": [
        {"id": third.pk, "kind": NOTOK}, first.pk, {"id": second.pk, "kind": ANY},
    ]}, format="json")  # fmt: skip

    assert created.status_code == 201
    shown = api(alice).get(f"/api/v1/jobs/{created.json()['id']}/").json()
    assert shown["depends_on"] == [first.pk, second.pk, third.pk]
    assert shown["dependencies"] == [
        {"id": first.pk, "kind": OK}, {"id": second.pk, "kind": ANY},
        {"id": third.pk, "kind": NOTOK},
    ]  # fmt: skip
    assert sorted(Dependency.objects.values_list("on_id", "kind")) == [
        (first.pk, OK), (second.pk, ANY), (third.pk, NOTOK)
    ]  # fmt: skip


def test_an_object_without_a_kind_waits_for_a_success(alice, alpha):
    first = submit(alice, alpha)

    created = api(alice).post(
        "/api/v1/jobs/", {**API_SPEC, "depends_on": [{"id": first.pk}]}, format="json"
    )

    assert created.json()["dependencies"] == [{"id": first.pk, "kind": OK}]


def test_the_job_list_costs_the_same_queries_for_one_job_with_dependencies_as_for_five(
    alice, alpha
):
    train = submit(alice, alpha)

    def list_queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert api(alice).get("/api/v1/jobs/").status_code == 200
        return len(seen)

    submit(alice, alpha, (train, ANY))
    one = list_queries()
    for kind in (OK, NOTOK, ANY, OK):
        submit(alice, alpha, (train, kind))

    assert list_queries() == one


SHAPE = 'A job id, or {"id": <job id>, "kind": "afterok" | "afterany" | "afternotok"}.'
BAD = [
    # (case, depends_on with "A" for a job of Alice's, the error wanted)
    ("an unknown kind", [{"id": "A", "kind": "afterall"}],
     {"0": ["'afterall' is no dependency kind: afterok, afterany or afternotok."]}),
    ("a kind that is no string", [{"id": "A", "kind": ["afterany"]}],
     {"0": ["['afterany'] is no dependency kind: afterok, afterany or afternotok."]}),
    ("no id", [{"kind": ANY}], {"0": [SHAPE]}),
    ("another key", [{"id": "A", "kind": ANY, "after": 1}], {"0": [SHAPE]}),
    ("a list", [["A", ANY]], {"0": [SHAPE]}),
    ("null", [None], {"0": ["This field may not be null."]}),
    ("true", [True], {"0": [SHAPE]}),
    ("an id that is none", [{"id": "x", "kind": ANY}], {"0": ["A valid integer is required."]}),
    ("an id too large", [{"id": "9" * 25}],
     {"0": ["Ensure this value is less than or equal to 9223372036854775807."]}),
    ("named twice with two kinds", ["A", {"id": "A", "kind": NOTOK}], ["Job #A is named twice."]),
    ("no list", {"id": "A", "kind": ANY}, ['Expected a list of items but got type "dict".']),
]  # fmt: skip


@pytest.mark.parametrize(("case", "depends_on", "want"), BAD, ids=[c[0] for c in BAD])
def test_a_malformed_depends_on_is_a_400_naming_it_and_writes_nothing(
    alice, alpha, case, depends_on, want
):
    pk = submit(alice, alpha).pk
    before = (Job.objects.count(), Dependency.objects.count(), JobEvent.objects.count())

    body = json.loads(json.dumps(depends_on).replace('"A"', str(pk)))
    response = api(alice).post("/api/v1/jobs/", {**API_SPEC, "depends_on": body}, format="json")

    assert response.status_code == 400
    assert response.json() == {"depends_on": json.loads(json.dumps(want).replace("#A", f"#{pk}"))}
    assert (Job.objects.count(), Dependency.objects.count(), JobEvent.objects.count()) == before


def test_a_resubmitted_job_waits_for_the_same_jobs_in_the_same_ways(alice, alpha):
    train, probe = submit(alice, alpha), submit(alice, alpha)
    report = submit(alice, alpha, (train, OK), (probe, NOTOK))
    cycle.run_cycle()
    finish(probe, State.FAILED)
    finish(train, State.SUCCEEDED)
    cycle.run_cycle()
    finish(Job.objects.get(pk=report.pk), State.SUCCEEDED)

    again, _ = actions.resubmit(alice, Job.objects.get(pk=report.pk))

    assert sorted(again.dependency_links.values_list("on_id", "kind")) == [
        (train.pk, OK), (probe.pk, NOTOK)
    ]  # fmt: skip


# -- the portal and the command line ----------------------------------------------------------


def test_the_submit_form_takes_the_kinds_as_the_command_line_writes_them(client, alice, alpha):
    first, second, third = submit(alice, alpha), submit(alice, alpha), submit(alice, alpha)
    client.force_login(alice)

    response = client.post("/jobs/new/", {
        **FORM, "depends_on": f"#{first.pk}, afterany:{second.pk} afternotok:{third.pk}"
    })  # fmt: skip

    job = Job.objects.latest("pk")
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert sorted(job.dependency_links.values_list("on_id", "kind")) == [
        (first.pk, OK), (second.pk, ANY), (third.pk, NOTOK)
    ]  # fmt: skip


def test_the_submit_form_shows_an_unknown_kind_on_its_field_and_writes_nothing(
    client, alice, alpha
):
    first = submit(alice, alpha)
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, "depends_on": f"afterall:{first.pk}"})

    assert response.status_code == 400
    assert (
        '<span class="error" data-field="depends_on">item 1: &#x27;afterall&#x27; is no '
        "dependency kind: afterok, afterany or afternotok.</span>"
    ) in response.text
    assert Job.objects.count() == 1


PARSED = [
    # (what is written, the depends_on items)
    ("12,13", [12, 13]),
    ("#12, 13", [12, 13]),
    ("afterany:12,13", [{"id": 12, "kind": ANY}, {"id": 13, "kind": ANY}]),
    ("afterok:5,afternotok:12:13",
     [{"id": 5, "kind": OK}, {"id": 12, "kind": NOTOK}, {"id": 13, "kind": NOTOK}]),
    ("4 afterany:5", [4, {"id": 5, "kind": ANY}]),
    ("x afterall:7", ["x", {"id": 7, "kind": "afterall"}]),
    ("afterany:", [{"id": "", "kind": ANY}]),
    ("", []),
]  # fmt: skip


@pytest.mark.parametrize(("text", "want"), PARSED)
def test_dependencies_are_read_as_slurm_writes_them(text, want):
    assert dependency_items(text) == want


@pytest.mark.django_db(transaction=True)
def test_the_cli_adds_the_dependencies_of_depends_on_to_the_files(cli):  # noqa: F811
    first, second, third = (int(cli("submit", "-", stdin=json.dumps(CLI_SPEC)).stdout.split()[0])
                            for _ in range(3))  # fmt: skip

    submitted = cli("submit", "-", "--depends-on", f"afterany:{second},{third}",
                    stdin=json.dumps({**CLI_SPEC, "depends_on": [first]}))  # fmt: skip
    refused = cli("submit", "-", "--depends-on", f"afterall:{first}", stdin=json.dumps(CLI_SPEC))

    assert submitted.returncode == 0, submitted.stderr
    shown = json.loads(cli("status", submitted.stdout.split()[0]).stdout)
    assert shown["dependencies"] == [
        {"id": first, "kind": OK}, {"id": second, "kind": ANY}, {"id": third, "kind": ANY}
    ]  # fmt: skip
    assert refused.returncode != 0 and "is no dependency kind" in refused.stderr


# -- the job page ------------------------------------------------------------------------------


def test_the_job_page_shows_each_dependencys_kind(client, alice, alpha):
    train, probe = submit(alice, alpha, name="train-llama"), submit(alice, alpha)
    report = submit(alice, alpha, (train, OK), (probe, ANY))
    client.force_login(alice)

    page = client.get(f"/jobs/{report.pk}/").text

    assert f'<a href="/jobs/{train.pk}/">#{train.pk} train-llama</a>' in page
    assert '<span class="kind">afterok</span>' in page
    assert '<span class="kind">afterany</span>' in page


def test_the_job_page_lists_the_jobs_waiting_for_it_the_first_ten_and_how_many_more(
    client, alice, alpha
):
    train = submit(alice, alpha)
    waiting = [submit(alice, alpha, (train, kind)) for kind in [ANY] + [OK] * 11]
    submit(alice, alpha)  # waits for nothing
    client.force_login(alice)

    page = client.get(f"/jobs/{train.pk}/").text

    links = ", ".join(f'<a href="/jobs/{j.pk}/" data-job="{j.pk}">#{j.pk}</a>'
                      for j in waiting[1:10])  # fmt: skip
    first = f'<a href="/jobs/{waiting[0].pk}/" data-job="{waiting[0].pk}">#{waiting[0].pk}</a>'
    assert (
        f'<dt>Waiting for this job</dt><dd id="dependents">{first} (afterany), {links} and 2 '
        "more</dd>"
    ) in page


def test_the_job_page_lists_only_the_waiting_jobs_the_viewer_may_see(
    client, alice, alpha, charlie, bob
):
    train = submit(alice, alpha)
    shared, private = submit(alice, alpha, (train, OK)), submit(alice, alpha, (train, OK))
    for job in (train, shared):
        assign_perm("jobs.view_job", charlie, job)

    client.force_login(charlie)
    charlies = client.get(f"/jobs/{train.pk}/").text
    client.force_login(bob)
    bobs = client.get(f"/jobs/{train.pk}/").text

    assert f'data-job="{shared.pk}"' in charlies
    assert f'data-job="{private.pk}"' not in charlies and "more</dd>" not in charlies
    assert f'data-job="{shared.pk}"' in bobs and f'data-job="{private.pk}"' in bobs


def test_the_job_page_lists_no_waiting_jobs_once_the_job_has_ended(client, alice, alpha):
    train = submit(alice, alpha)
    submit(alice, alpha, (train, OK))
    cycle.run_cycle()
    client.force_login(alice)
    assert "Waiting for this job" in client.get(f"/jobs/{train.pk}/").text

    finish(train, State.SUCCEEDED)

    assert "Waiting for this job" not in client.get(f"/jobs/{train.pk}/").text


def test_a_batchs_pages_list_the_jobs_waiting_for_the_batch(client, alice, alpha):
    shards = batch(alice, alpha, 2)
    merge = submit(alice, alpha, (shards[0], ANY))
    client.force_login(alice)

    for shard in shards:
        page = client.get(f"/jobs/{shard.pk}/").text
        assert f'<dd id="dependents"><a href="/jobs/{merge.pk}/"' in page


def test_the_job_page_costs_the_same_queries_for_one_waiting_job_as_for_fifteen(
    client, alice, alpha
):
    train = submit(alice, alpha)
    client.force_login(alice)

    def page_queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert client.get(f"/jobs/{train.pk}/").status_code == 200
        return len(seen)

    submit(alice, alpha, (train, OK))
    one = page_queries()
    for kind in (OK, ANY, NOTOK) * 4 + (ANY, ANY):
        submit(alice, alpha, (train, kind))

    assert page_queries() == one
