"""Dependencies changed after submission (Slurm's `scontrol update dependency=`): a queued job's
list replaced, in a submission's forms, by whoever may cancel it; refused for a job that has
left the queue, for a dependency on itself or a cycle, and for whatever a submission refuses."""

import threading

import pytest
from guardian.shortcuts import assign_perm
from rest_framework.exceptions import ValidationError

from jobs import actions, cycle, dependencies
from jobs.dependencies import Wait
from jobs.models import Attempt, Dependency, Job, JobEvent
from jobs.states import State
from tests.factories import JobFactory, UserFactory
from tests.jobs.test_dependencies import (
    REFUSED,
    api,
    beside_a_cancel_in_flight,
    end,
    in_a_thread,
    state,
)
from tests.jobs.test_dependency_kinds import ANY, NOTOK, OK, batch, finish, submit
from tests.jobs.test_hold import viewer  # noqa: F401 - the fixture
from tests.jobs.test_lifecycle_races import after_deciding, commit_after
from tests.processes import wait_until, waiting_on_a_lock

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("normal_priority", "room")]
Outcome = Attempt.Outcome
NAME = "nightly-eval"


def change(user, job: Job, depends_on: list, **body):
    """POST the job's new dependencies as a client does."""
    return api(user).post(
        f"/api/v1/jobs/{job.pk}/dependencies/", {"depends_on": depends_on, **body}, format="json"
    )


def depend(job: Job, *waits: tuple[Job, str], singleton: bool = False):
    """Change the job's dependencies through the verb, as alice."""
    fresh = Job.objects.get(pk=job.pk)
    return actions.set_dependencies(
        fresh, [Wait(on.pk, kind) for on, kind in waits], singleton, "alice"
    )


def links(job: Job) -> list[tuple[int, str]]:
    return sorted(Dependency.objects.filter(job=job).values_list("on_id", "kind"))


def written() -> tuple:
    """What a refused change must leave as it was."""
    return (sorted(Dependency.objects.values_list("job_id", "on_id", "kind")),
            JobEvent.objects.count(),
            sorted(Job.objects.values_list("id", "singleton")))  # fmt: skip


# -- changed ---------------------------------------------------------------------------------


def test_a_queued_job_given_a_dependency_waits_for_it_then_is_placed(alice, alpha):
    train, evaluate = submit(alice, alpha), submit(alice, alpha)

    response = change(alice, evaluate, [train.pk])

    assert response.status_code == 200, response.json()
    assert response.json()["dependencies"] == [{"id": train.pk, "kind": OK}]
    assert cycle.run_cycle().placed == [train.pk]
    assert Job.objects.get(pk=evaluate.pk).pending_message == (
        f"Waiting for job #{train.pk} to succeed."
    )
    finish(train, State.SUCCEEDED)
    assert cycle.run_cycle().placed == [evaluate.pk]


def test_an_empty_list_removes_its_dependencies_and_the_job_is_placed(alice, alpha):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, (train, OK), name=NAME, singleton=True)
    cycle.run_cycle()

    response = change(alice, evaluate, [])

    assert response.status_code == 200
    assert (response.json()["dependencies"], response.json()["singleton"]) == ([], False)
    assert cycle.run_cycle().placed == [evaluate.pk]


def test_the_new_list_replaces_the_old_one_kinds_and_singleton_included(alice, alpha):
    train, probe, flaky = submit(alice, alpha), submit(alice, alpha), submit(alice, alpha)
    report = submit(alice, alpha, (train, OK), (probe, OK))

    new = [{"id": flaky.pk, "kind": NOTOK}, {"id": probe.pk, "kind": ANY}]
    response = change(alice, report, new, singleton=True)

    assert response.status_code == 200
    assert links(report) == [(probe.pk, ANY), (flaky.pk, NOTOK)]
    assert Job.objects.get(pk=report.pk).singleton
    assert (response.json()["changed"], response.json()["depends_on"]) == (
        1, [probe.pk, flaky.pk]
    )  # fmt: skip


def test_a_job_may_be_made_to_wait_for_a_later_job(alice, alpha):
    earlier, later = submit(alice, alpha), submit(alice, alpha)

    assert change(alice, earlier, [later.pk]).status_code == 200

    assert cycle.run_cycle().placed == [later.pk]
    finish(later, State.SUCCEEDED)
    assert cycle.run_cycle().placed == [earlier.pk]


def test_a_job_made_a_singleton_waits_for_the_earlier_jobs_of_its_name(alice, alpha):
    earlier, later = submit(alice, alpha, name=NAME), submit(alice, alpha, name=NAME)

    assert change(alice, later, [], singleton=True).status_code == 200

    assert cycle.run_cycle().placed == [earlier.pk]
    assert Job.objects.get(pk=later.pk).pending_message == (
        f"Waiting for job #{earlier.pk} to end (singleton)."
    )


def test_the_change_is_in_the_jobs_history(alice, alpha):
    train, probe, evaluate = submit(alice, alpha), submit(alice, alpha), submit(alice, alpha)

    change(alice, evaluate, [{"id": probe.pk, "kind": ANY}, train.pk], singleton=True)

    event = JobEvent.objects.filter(job=evaluate).latest("id")
    assert (event.from_state, event.to_state) == (State.QUEUED, State.QUEUED)
    assert event.reason == (
        f"dependencies afterok:{train.pk},afterany:{probe.pk},singleton, set by alice"
    )


def test_a_batchs_dependencies_change_for_every_shard(alice, alpha):
    train = submit(alice, alpha)
    shards = batch(alice, alpha, 3)

    response = change(alice, shards[0], [train.pk], singleton=True)
    cycle.run_cycle()

    assert response.json()["changed"] == 3
    waiting = Job.objects.filter(pk__in=[s.pk for s in shards])
    assert set(waiting.values_list("state", "pending_reason", "singleton")) == {
        (State.QUEUED, "waiting_for_dependency", True)
    }
    assert JobEvent.objects.filter(job__in=shards, reason__startswith="dependencies").count() == 3


# -- refused: the job ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", [State.SCHEDULED, State.CANCELED])
def test_a_job_that_has_left_the_queue_is_a_409_and_keeps_its_dependencies(alice, alpha, how):
    train, probe = submit(alice, alpha), submit(alice, alpha)
    evaluate = submit(alice, alpha, (train, ANY))
    if how == State.CANCELED:
        actions.cancel(evaluate, "canceled by alice")
    else:
        finish(train, State.CANCELED)
        cycle.run_cycle()
    before = written()

    response = change(alice, evaluate, [probe.pk])

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"Only a queued job's dependencies change: job #{evaluate.pk} is {how}."
    }
    assert written() == before


def test_a_shard_other_than_a_batchs_first_is_a_409_naming_the_batch(alice, alpha):
    shards = batch(alice, alpha, 2)

    response = change(alice, shards[1], [])

    assert response.status_code == 409
    assert response.json() == {"detail": f"Job #{shards[1].pk} is shard 1 of batch "
                               f"#{shards[0].pk}: change the batch's dependencies, "
                               f"#{shards[0].pk}."}  # fmt: skip


def test_a_batch_with_a_shard_that_has_left_the_queue_is_a_409(alice, alpha):
    train = submit(alice, alpha)
    shards = batch(alice, alpha, 3)
    actions.cancel(shards[2], "canceled by alice")
    before = written()

    response = change(alice, shards[0], [train.pk])

    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"Only a queued job's dependencies change: shard #{shards[2].pk} of batch "
        f"#{shards[0].pk} is canceled."
    )
    assert written() == before


# -- refused: a cycle ---------------------------------------------------------------------------


def chain(alice, alpha) -> dict[str, Job]:
    """a; b waits for a; c for b; a batch for a; s, a singleton of a's name, after a; and d,
    which waited for a, canceled."""
    a = submit(alice, alpha, name=NAME)
    b = submit(alice, alpha, (a, OK))
    c = submit(alice, alpha, (b, ANY))
    shards = batch(alice, alpha, 2, (a, NOTOK))
    s = submit(alice, alpha, name=NAME, singleton=True)
    d = submit(alice, alpha, (a, OK))
    actions.cancel(d, "canceled by alice")
    return {"a": a, "b": b, "c": c, "batch": shards[0], "s": s, "d": d}


CYCLES = [
    # (case, depends_on of job a, the error wanted, or "" for a change made)
    ("itself", ["a"], "Job #{a} cannot wait for itself."),
    ("a job that waits for it", ["b"], "Job #{b} waits for job #{a}, directly or through other "
     "jobs: if each waited for the other, neither would ever run."),
    ("through others", ["c"], "Job #{c} waits for job #{a}, directly or through other jobs: if "
     "each waited for the other, neither would ever run."),
    ("a batch that waits for it", ["batch"], "Job #{batch} waits for job #{a}, directly or "
     "through other jobs: if each waited for the other, neither would ever run."),
    ("a later singleton of its name", ["s"], "Job #{s} waits for job #{a}, directly or through "
     "other jobs: if each waited for the other, neither would ever run."),
    ("a job that waited for it and has ended", ["d"], ""),
]  # fmt: skip


@pytest.mark.parametrize(("case", "names", "want"), CYCLES, ids=[c[0] for c in CYCLES])
def test_a_change_that_would_close_a_cycle_is_a_400_naming_depends_on_and_writes_nothing(
    alice, alpha, case, names, want
):
    chained = chain(alice, alpha)
    ids = {name: job.pk for name, job in chained.items()}
    before = written()

    response = change(alice, chained["a"], [{"id": ids[n], "kind": ANY} for n in names])

    if want:
        assert response.status_code == 400
        assert response.json() == {"depends_on": [want.format(**ids)]}
        assert written() == before
    else:
        assert response.status_code == 200, response.json()


def test_a_singleton_that_an_earlier_job_of_its_name_waits_for_is_a_400_naming_singleton(
    alice, alpha
):
    earlier, later = submit(alice, alpha, name=NAME), submit(alice, alpha, name=NAME)
    report = submit(alice, alpha, (later, OK))
    assert change(alice, earlier, [report.pk]).status_code == 200  # earlier -> report -> later
    before = written()

    response = change(alice, later, [], singleton=True)

    assert response.status_code == 400
    assert response.json() == {"singleton": [
        f"Job #{earlier.pk}, an earlier job of the same name, waits for job #{later.pk}, "
        "directly or through other jobs: a singleton waits for it, so neither would ever run."
    ]}  # fmt: skip
    assert written() == before


# -- refused: as a submission -------------------------------------------------------------------


@pytest.mark.parametrize(("case", "names", "want"), REFUSED, ids=[c[0] for c in REFUSED])
def test_what_a_submission_refuses_is_a_400_naming_depends_on_and_writes_nothing(
    alice, alpha, jobs, case, names, want
):
    target = submit(alice, alpha)
    ids = {name: job.pk for name, job in jobs.items()}
    before = written()

    response = change(alice, target, [ids.get(name, name) for name in names])

    assert response.status_code == 400
    wanted = [m.format(**ids) for m in want] if isinstance(want, list) else want
    assert response.json() == {"depends_on": wanted}
    assert written() == before


def test_a_body_without_depends_on_is_a_400_naming_it(alice, alpha):
    target = submit(alice, alpha)

    response = api(alice).post(f"/api/v1/jobs/{target.pk}/dependencies/", {}, format="json")

    assert response.status_code == 400
    assert response.json() == {"depends_on": ["This field is required."]}


# -- who may change them -------------------------------------------------------------------------


def test_a_member_of_the_team_may_change_a_jobs_dependencies(alice, alpha, bob):
    train, evaluate = submit(alice, alpha), submit(alice, alpha)

    response = change(bob, evaluate, [train.pk])

    assert response.status_code == 200
    assert links(evaluate) == [(train.pk, OK)]


def test_a_viewer_may_see_the_job_but_not_change_its_dependencies(
    alice,
    alpha,
    viewer,  # noqa: F811 - the fixture
):
    evaluate = submit(alice, alpha)

    response = change(viewer, evaluate, [])

    assert response.status_code == 403
    assert response.json() == {"detail": "You may see this job but not change its dependencies."}


def test_another_tenants_job_is_answered_exactly_as_one_that_does_not_exist(alice, alpha, charlie):
    evaluate = submit(alice, alpha)

    theirs, missing = change(charlie, evaluate, []), change(charlie, Job(pk=10**9), [])

    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()


def test_a_cancel_grant_lets_an_outsider_change_them_and_answers_only_what_was_asked(
    alice, alpha, charlie
):
    train, evaluate = submit(alice, alpha), submit(alice, alpha)
    assign_perm("jobs.cancel_job", charlie, evaluate)
    assign_perm("jobs.view_job", charlie, train)

    response = change(charlie, evaluate, [train.pk])

    assert response.status_code == 200
    assert response.json() == {"id": evaluate.pk, "state": State.QUEUED, "singleton": False,
                               "dependencies": [{"id": train.pk, "kind": OK}],
                               "changed": 1}  # fmt: skip


def test_a_view_grant_alone_does_not_let_an_outsider_change_them(alice, alpha, charlie):
    evaluate = submit(alice, alpha)
    assign_perm("jobs.view_job", charlie, evaluate)

    assert change(charlie, evaluate, []).status_code == 403


# -- the admin ----------------------------------------------------------------------------------


def test_the_admins_job_page_shows_each_dependencys_kind(client, alice, alpha):
    train, probe = submit(alice, alpha, name="train-llama"), submit(alice, alpha, name="probe")
    report = submit(alice, alpha, (train, OK), (probe, ANY))
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    page = client.get(f"/admin/jobs/job/{report.pk}/change/").text

    assert (
        f'afterok <a href="/admin/jobs/job/{train.pk}/change/">train-llama (#{train.pk})</a>, '
        f'afterany <a href="/admin/jobs/job/{probe.pk}/change/">probe (#{probe.pk})</a>'
    ) in page


# -- races ----------------------------------------------------------------------------------------


def paused_after_writing(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """The first change stops once it has written its links, before it commits: `wrote` is set
    then, and it goes on once `go` is."""
    go, wrote, replace = threading.Event(), threading.Event(), dependencies.replace

    def replace_then_wait(*args):
        replace(*args)
        if not wrote.is_set():
            wrote.set()
            assert go.wait(10)

    monkeypatch.setattr(dependencies, "replace", replace_then_wait)
    return go, wrote


def changed_at_once(monkeypatch, first: tuple, second: tuple) -> tuple:
    """depend(*first), stopped before it commits, and depend(*second) beside it; the first goes
    on once the second waits for it. What each returned (or raised)."""
    go, wrote = paused_after_writing(monkeypatch)
    one, ones = in_a_thread(depend, *first)
    assert wrote.wait(10)
    two, twos = in_a_thread(depend, *second)
    try:
        assert wait_until(lambda: waiting_on_a_lock("quotas_tenant"), 10)
    finally:
        go.set()
        for thread in (one, two):
            thread.join(10)
    return ones[0], twos[0]


@pytest.mark.django_db(transaction=True)
def test_two_changes_making_two_jobs_wait_for_each_other_at_once_refuse_the_second(
    monkeypatch, alice, alpha
):
    a, b = submit(alice, alpha), submit(alice, alpha)

    first, second = changed_at_once(monkeypatch, (a, (b, OK)), (b, (a, OK)))

    assert first == 1
    assert isinstance(second, ValidationError)
    assert "waits for job" in str(second.detail["depends_on"][0])
    assert (links(a), links(b)) == ([(b.pk, OK)], [])


@pytest.mark.django_db(transaction=True)
def test_two_changes_closing_a_ring_of_four_jobs_at_once_refuse_the_second(
    monkeypatch, alice, alpha
):
    # b waits for c and d for a; a -> b and c -> d would close a -> b -> c -> d -> a. The two
    # changes share no job.
    a, c = submit(alice, alpha), submit(alice, alpha)
    b, d = submit(alice, alpha, (c, OK)), submit(alice, alpha, (a, OK))

    first, second = changed_at_once(monkeypatch, (a, (b, OK)), (c, (d, OK)))

    assert first == 1
    assert isinstance(second, ValidationError)
    assert str(second.detail["depends_on"][0]).startswith(f"Job #{d.pk} waits for job #{c.pk}")
    assert links(c) == []


@pytest.mark.django_db(transaction=True)
def test_a_change_waiting_for_the_commits_placement_finds_the_job_placed_and_is_refused(
    monkeypatch, alice, alpha
):
    train, evaluate = submit(alice, alpha), submit(alice, alpha)
    outcome = []

    def changing():
        try:
            outcome.append(depend(evaluate, (train, OK)))
        except actions.DependenciesRefused as refusal:
            outcome.append(refusal)

    # The change locks the tenant first (dependencies.lock_change), which the commit holds.
    started = commit_after(monkeypatch, changing, table="quotas_tenant")

    placed = cycle.run_cycle().placed
    started[0].join(10)

    assert sorted(placed) == [train.pk, evaluate.pk]
    assert isinstance(outcome[0], actions.DependenciesRefused)
    assert (state(evaluate), links(evaluate)) == (State.SCHEDULED, [])


@pytest.mark.parametrize("what", ["dependency", "singleton"])
@pytest.mark.django_db(transaction=True)
def test_a_job_given_a_wait_after_the_snapshot_is_not_placed_by_that_cycle(
    monkeypatch, alice, alpha, what
):
    train = submit(alice, alpha, name=NAME)
    cycle.run_cycle()
    evaluate = submit(alice, alpha, name=NAME)
    if what == "dependency":
        after_deciding(monkeypatch, lambda: depend(evaluate, (train, OK)))
    else:
        after_deciding(monkeypatch, lambda: depend(evaluate, singleton=True))

    result = cycle.run_cycle()

    assert (result.placed, state(evaluate)) == ([], State.QUEUED)
    monkeypatch.undo()
    cycle.run_cycle()
    assert Job.objects.get(pk=evaluate.pk).pending_reason == "waiting_for_dependency"


@pytest.mark.parametrize("what", ["dependency", "singleton"])
def test_a_preemptor_given_a_wait_after_the_cycle_decided_evicts_nobody(alice, alpha, what):
    train = submit(alice, alpha, name=NAME)
    preemptor = submit(alice, alpha, name=NAME)
    victim = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    if what == "dependency":
        depend(preemptor, (train, OK))
    else:
        depend(preemptor, singleton=True)

    asked = actions.preempt({preemptor.pk: [victim.pk]})

    assert asked == []
    assert Job.objects.get(pk=preemptor.pk).preempting_until is None


@pytest.mark.django_db(transaction=True)
def test_a_change_naming_a_job_whose_cancel_is_in_flight_waits_for_it_then_is_refused(alice, alpha):
    train, evaluate = submit(alice, alpha), submit(alice, alpha)

    outcome = beside_a_cancel_in_flight(train, depend, evaluate, (train, OK))

    assert isinstance(outcome, ValidationError)
    assert outcome.detail["depends_on"][0] == (
        f"Job #{train.pk} was canceled: a job that depends on it would never run."
    )
    assert links(evaluate) == []


@pytest.mark.django_db(transaction=True)
def test_a_change_racing_the_failure_of_a_job_it_waits_for_gives_way_and_the_job_is_canceled(
    monkeypatch, alice, alpha
):
    train = submit(alice, alpha)
    evaluate = submit(alice, alpha, (train, OK))
    cycle.run_cycle()
    # The failure stops once it holds train's row, before it locks evaluate's to cancel it.
    go, reached, lock_dependents = (
        threading.Event(),
        threading.Event(),
        dependencies.lock_dependents,
    )

    def wait_then_lock(ended):
        reached.set()
        assert go.wait(10)
        return lock_dependents(ended)

    monkeypatch.setattr(dependencies, "lock_dependents", wait_then_lock)
    failing, _ = in_a_thread(end, train, Outcome.USER_ERROR)
    assert reached.wait(10)
    changing, changed = in_a_thread(depend, evaluate, (train, ANY))
    try:
        assert wait_until(lambda: waiting_on_a_lock("jobs_job"), 10)
    finally:
        go.set()
        for thread in (failing, changing):
            thread.join(10)

    assert (state(train), state(evaluate)) == (State.FAILED, State.CANCELED)
    assert isinstance(changed[0], actions.DependenciesRefused)
    assert links(evaluate) == [(train.pk, OK)]


def test_an_outsider_who_cannot_see_every_job_it_waits_for_may_not_change_them(
    client, alice, alpha, charlie
):
    hidden = submit(alice, alpha)
    evaluate = submit(alice, alpha, (hidden, OK))
    assign_perm("jobs.cancel_job", charlie, evaluate)
    assign_perm("jobs.view_job", charlie, evaluate)

    refused = change(charlie, evaluate, [])
    client.force_login(charlie)
    page = client.get(f"/jobs/{evaluate.pk}/").content.decode()
    posted = client.post(f"/jobs/{evaluate.pk}/dependencies/", {"dependencies": "none"})

    assert refused.status_code == posted.status_code == 403
    assert "cannot see" in refused.json()["detail"]
    assert 'id="dependencies-form"' not in page
    assert links(evaluate) == [(hidden.pk, OK)]  # not dropped
