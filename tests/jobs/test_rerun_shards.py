"""Rerunning some shards of an ended batch (Slurm's `sbatch --array=3,17,512` after `sacct`):
resubmit's `shards`, "unsucceeded" or a list of indexes, makes a batch of those shards alone,
each keeping its index and the batch's shard count, so its workers read the same part of the
input. The new batch is a batch like any other: listed, counted, canceled and waited for whole."""

import threading

import pytest
from django.db import connection, transaction
from django.test import Client
from rest_framework.exceptions import ValidationError
from rest_framework.test import APIClient

from clusters.agent.runner import spec_from_dict
from clusters.backends import base
from jobs import actions, cycle, dependencies
from jobs.models import Attempt, Family, Job
from jobs.states import State
from quotas.models import Membership
from quotas.tokens import create_token
from tests.factories import (
    AttemptFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    PriorityClassFactory,
    UserFactory,
)
from tests.jobs.test_cli import run_cli
from tests.jobs.test_resubmit import press_resubmit

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome

BATCH = {"name": "embed", "family": Family.BATCH_INFERENCE, "image": "embed:2",
         "command": ["embed", "--part"], "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1,
         "max_runtime_s": 600, "shards": 5}  # fmt: skip


@pytest.fixture
def normal(db):
    return PriorityClassFactory(name="normal", value=0)


@pytest.fixture
def room(east):
    return NodeFactory(cluster=east, name="east-0", gpu_count=8)


def submit(owner, tenant, priority_class, **spec) -> Job:
    job, _ = actions.submit(owner, tenant, {**BATCH, "priority_class": priority_class, **spec})
    return job


def end(job: Job, outcome: str = Outcome.SUCCEEDED) -> None:
    """End the job's live attempt as its agent reports it."""
    code = 0 if outcome == Outcome.SUCCEEDED else 1
    actions.end_attempt(job.attempts.get(outcome="").pk, outcome, exit_code=code, reason="done")


def run_all(jobs, failed=()) -> None:
    """Place the jobs, then end each: those at the indexes `failed` with an error of their own
    code, the others succeeded."""
    cycle.run_cycle()
    for job in jobs:
        end(job, Outcome.USER_ERROR if job.shard_index in failed else Outcome.SUCCEEDED)


@pytest.fixture
def ended(alice, alpha, normal, room) -> Job:
    """A batch of 5 that has ended, its shards 1 and 3 failed."""
    batch = submit(alice, alpha, normal)
    run_all(batch.batch(), failed={1, 3})
    return batch


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def rerun(user, batch, shards="unsucceeded", **body):
    return api(user).post(
        f"/api/v1/jobs/{batch.pk}/resubmit/", {"shards": shards, **body}, format="json"
    )


def rerun_batch(user, batch, shards="unsucceeded") -> Job:
    response = rerun(user, batch, shards)
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def rows(batch: Job) -> list[tuple]:
    return list(batch.batch().values_list("shard_index", "shards", "parent_id", "state"))


# -- the API -------------------------------------------------------------------------------


def test_the_unsucceeded_shards_are_rerun_alone_each_keeping_its_index(ended, bob):
    again = rerun_batch(bob, ended)

    assert rows(again) == [(1, 5, None, State.QUEUED), (3, 5, again.pk, State.QUEUED)]
    assert {job.resubmitted_from_id for job in again.batch()} == {ended.pk}
    assert {job.owner for job in again.batch()} == {bob}
    assert again.is_batch and (again.image, again.command) == (ended.image, ended.command)


def test_a_canceled_shard_counts_as_unsucceeded(alice, alpha, normal, room):
    batch = submit(alice, alpha, normal, shards=3)
    shards = list(batch.batch())
    cycle.run_cycle()
    end(shards[0])
    actions.cancel(shards[1], "canceled by alice")
    end(shards[2], Outcome.USER_ERROR)

    again = rerun_batch(alice, batch)

    assert [index for index, *_ in rows(again)] == [1, 2]


def test_each_rerun_shard_is_told_its_own_index_and_the_batchs_count(ended, alice, agent):
    again = rerun_batch(alice, ended)
    cycle.run_cycle()

    run = agent.post("/api/v1/agent/east/heartbeat/", {"workers": []}, format="json").json()["run"]

    specs = [spec_from_dict(told) for told in run]
    env = {spec.job_id: base.worker_env(spec, spec.workers[0], "east-0", "/ckpt") for spec in specs}
    told = sorted((env[job.pk]["MLSCHED_SHARD_INDEX"], env[job.pk]["MLSCHED_SHARDS"])
                  for job in again.batch())  # fmt: skip
    assert told == [("1", "5"), ("3", "5")]
    assert len(run) == 2


def test_the_named_shards_are_rerun_a_succeeded_one_included(ended, alice):
    again = rerun_batch(alice, ended, [4, 0, 3])

    assert [index for index, *_ in rows(again)] == [0, 3, 4]


def test_the_rerun_batch_lists_its_shards_and_counts_them_by_state(ended, alice):
    again = rerun_batch(alice, ended)

    listed = api(alice).get("/api/v1/jobs/", {"batch": again.pk}).json()["jobs"]
    shard_3 = api(alice).get("/api/v1/jobs/", {"batch": again.pk, "shard": 3}).json()["jobs"]
    shown = api(alice).get(f"/api/v1/jobs/{again.pk}/").json()

    assert sorted(job["shard_index"] for job in listed) == [1, 3]
    assert [job["shard_index"] for job in shard_3] == [3]
    assert (shown["shards"], shown["shard_states"]) == (5, {State.QUEUED: 2})


def test_canceling_the_rerun_batch_cancels_both_shards(ended, alice):
    again = rerun_batch(alice, ended)

    response = api(alice).post(f"/api/v1/jobs/{again.pk}/cancel/")

    assert response.status_code == 202
    assert {state for *_, state in rows(again)} == {State.CANCELED}
    assert {state for *_, state in rows(ended)} == {State.SUCCEEDED, State.FAILED}


def test_a_job_waiting_for_the_rerun_batch_waits_for_both_shards(ended, alice, alpha, normal):
    again = rerun_batch(alice, ended)
    merge = submit(alice, alpha, normal, name="merge", shards=1,
                   depends_on=[dependencies.Wait(again.pk, "afterok")])  # fmt: skip
    first, last = again.batch()
    cycle.run_cycle()

    end(first)
    assert cycle.run_cycle().placed == []
    assert Job.objects.get(pk=merge.pk).pending_reason == "waiting_for_dependency"

    end(last)
    assert cycle.run_cycle().placed == [merge.pk]


def test_a_rerun_shard_that_fails_again_is_rerun_from_the_rerun(ended, alice):
    again = rerun_batch(alice, ended)
    run_all(again.batch(), failed={3})

    third = rerun_batch(alice, again)

    assert rows(third) == [(3, 5, None, State.QUEUED)]
    assert third.is_batch and third.resubmitted_from_id == again.pk


def test_resubmitting_a_rerun_batch_whole_runs_the_same_shards(ended, alice):
    again = rerun_batch(alice, ended)
    run_all(again.batch())

    response = api(alice).post(f"/api/v1/jobs/{again.pk}/resubmit/")

    assert response.status_code == 201
    whole = Job.objects.get(pk=response.json()["id"])
    assert [(index, shards) for index, shards, *_ in rows(whole)] == [(1, 5), (3, 5)]


def test_shards_given_as_null_resubmit_the_batch_whole(ended, alice):
    response = rerun(alice, ended, None)

    assert response.status_code == 201
    assert [index for index, *_ in rows(Job.objects.get(pk=response.json()["id"]))] == [
        0,
        1,
        2,
        3,
        4,
    ]


def test_a_repeated_rerun_under_its_key_answers_the_same_batch(ended, alice):
    first = rerun(alice, ended, idempotency_key="rerun-embed")
    second = rerun(alice, ended, idempotency_key="rerun-embed")

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert Job.objects.filter(resubmitted_from=ended).count() == 2  # its 2 shards, once


def test_the_queue_limit_counts_the_rerun_shards_alone(ended, alice, alpha):
    alpha.max_queued_jobs = 2
    alpha.save()

    whole = api(alice).post(f"/api/v1/jobs/{ended.pk}/resubmit/")
    shards = rerun(alice, ended)

    assert whole.status_code == 400 and "not these 5 jobs" in whole.json()["tenant"][0]
    assert shards.status_code == 201


# -- refusals: 400 naming shards, nothing written ------------------------------------------


@pytest.mark.parametrize(
    "shards, says",
    [
        ([], "a list of shard indexes"),
        ("failed", "a list of shard indexes"),
        ("1,3", "a list of shard indexes"),
        ({"index": 1}, "a list of shard indexes"),
        ([True], "a list of shard indexes"),
        (["one"], "valid integer"),
        ([-1], "greater than or equal to 0"),
        ([5], "has no shard 5: its shards are 0 to 4"),
        ([10**30], "its shards are 0 to 4"),
        ([1, 3, 1], "Shard 1 is named twice."),
    ],
)
def test_a_bad_list_of_shards_is_a_400_naming_shards(ended, alice, shards, says):
    response = rerun(alice, ended, shards)

    assert response.status_code == 400
    assert says in str(response.json()["shards"])
    assert Job.objects.count() == 5


def test_shards_of_a_job_that_is_no_batch_is_a_400(alice, alpha, normal, room):
    single = submit(alice, alpha, normal, shards=1)
    run_all([single], failed={0})

    response = rerun(alice, single)

    assert response.status_code == 400
    assert response.json()["shards"] == [
        f"Job #{single.pk} is not a batch: resubmit it without shards."
    ]
    assert Job.objects.count() == 1


def test_shards_of_one_shard_of_a_batch_is_a_400_naming_the_batch(ended, alice):
    shard = ended.batch().get(shard_index=3)

    response = rerun(alice, shard)

    assert response.status_code == 400
    assert f"batch #{ended.pk}" in response.json()["shards"][0]
    assert Job.objects.count() == 5


@pytest.mark.parametrize("live", [State.QUEUED, State.SCHEDULED, State.RUNNING])
def test_a_batch_with_a_shard_still_live_is_a_400(ended, alice, live):
    Job.objects.filter(parent=ended, shard_index=4).update(state=live)

    response = rerun(alice, ended, [1])

    assert response.status_code == 400
    assert f"shard 4 is {live}" in response.json()["shards"][0]
    assert Job.objects.count() == 5


def test_a_batch_whose_every_shard_succeeded_has_none_to_rerun(alice, alpha, normal, room):
    batch = submit(alice, alpha, normal, shards=2)
    run_all(batch.batch())

    response = rerun(alice, batch)

    assert response.status_code == 400
    assert response.json()["shards"] == [
        f"Every shard of batch #{batch.pk} succeeded: none to rerun."
    ]
    assert Job.objects.count() == 2


def test_a_rerun_batch_reruns_only_shards_it_has(ended, alice):
    again = rerun_batch(alice, ended)
    run_all(again.batch())

    response = rerun(alice, again, [2])

    assert response.status_code == 400
    assert f"Batch #{again.pk} has no shard 2: it runs 2 of the 5" in response.json()["shards"][0]


def test_another_tenants_batch_is_a_404(ended, charlie):
    assert rerun(charlie, ended).status_code == 404
    assert Job.objects.count() == 5


def test_a_viewer_of_the_tenant_may_not_rerun_shards(ended, alpha):
    viewer = UserFactory(username="victor")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)

    assert rerun(viewer, ended).status_code == 403
    assert Job.objects.count() == 5


# -- the portal ----------------------------------------------------------------------------


@pytest.fixture
def browser(alice):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    return browser


def test_the_batch_page_offers_to_rerun_the_shards_that_did_not_succeed(browser, ended):
    page = browser.get(f"/jobs/{ended.pk}/").text

    assert 'id="rerun-form"' in page and 'id="resubmit-form"' in page
    assert "Rerun the 2 shards that did not succeed" in page


def test_the_rerun_form_runs_them_and_opens_the_new_batchs_page(browser, ended):
    answer = press_resubmit(browser, ended, rerun=True)

    again = Job.objects.get(resubmitted_from=ended, parent=None)
    assert answer.status_code == 302 and answer["Location"] == f"/jobs/{again.pk}/"
    assert [index for index, *_ in rows(again)] == [1, 3]
    page = browser.get(answer["Location"]).text
    assert '<span id="shards">2 of 5: <a class="shard-state"' in page and "2 queued</a>" in page


def test_a_double_click_on_the_rerun_form_makes_one_batch(browser, ended):
    press_resubmit(browser, ended, times=2, rerun=True)

    assert Job.objects.filter(resubmitted_from=ended).count() == 2


def test_one_shard_to_rerun_is_said_in_the_singular(browser, ended):
    Job.objects.filter(parent=ended, shard_index=3).update(state=State.SUCCEEDED)

    assert "Rerun the shard that did not succeed" in browser.get(f"/jobs/{ended.pk}/").text


@pytest.mark.parametrize(
    "indexes, state",
    [
        ([4], State.RUNNING),  # a shard still live
        ([1, 3], State.SUCCEEDED),  # every shard succeeded
    ],
)
def test_the_rerun_form_is_not_drawn_while_a_shard_lives_or_when_none_failed(
    browser, ended, indexes, state
):
    Job.objects.filter(parent=ended, shard_index__in=indexes).update(state=state)

    assert 'id="rerun-form"' not in browser.get(f"/jobs/{ended.pk}/").text


def test_the_rerun_form_is_not_drawn_while_its_shards_run_again_and_the_page_links_the_rerun(
    browser, ended, alice
):
    again = rerun_batch(alice, ended)  # shards 1 and 3, queued

    page = browser.get(f"/jobs/{ended.pk}/").text

    assert 'id="rerun-form"' not in page
    assert f'<dd id="resubmissions"><a href="/jobs/{again.pk}/">#{again.pk}</a></dd>' in page


def test_the_rerun_form_comes_back_once_the_rerun_has_ended_without_success(browser, ended, alice):
    again = rerun_batch(alice, ended)
    again.batch().update(state=State.FAILED)

    page = browser.get(f"/jobs/{ended.pk}/").text

    assert "Rerun the 2 shards that did not succeed" in page


def test_the_rerun_form_is_not_drawn_for_a_job_that_is_no_batch(browser, alice, alpha, normal):
    single = submit(alice, alpha, normal, shards=1)
    Job.objects.filter(pk=single.pk).update(state=State.FAILED)

    assert 'id="rerun-form"' not in browser.get(f"/jobs/{single.pk}/").text


def test_a_viewer_sees_no_rerun_form(client, ended, alpha):
    viewer = UserFactory(username="victor")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)
    client.force_login(viewer)

    page = client.get(f"/jobs/{ended.pk}/")

    assert page.status_code == 200 and 'id="rerun-form"' not in page.text


def test_a_rerun_refused_from_the_portal_says_why_on_the_page(browser, ended):
    page = browser.get(f"/jobs/{ended.pk}/")
    form = {"csrfmiddlewaretoken": browser.cookies["csrftoken"].value,
            "idempotency_key": page.context["rerun"]["key"], "shards": "unsucceeded"}  # fmt: skip
    Job.objects.filter(parent=ended, shard_index=4).update(state=State.RUNNING)

    answer = browser.post(f"/jobs/{ended.pk}/resubmit/", form)

    assert answer.status_code == 400
    assert "shard 4 is running" in answer.text
    assert Job.objects.count() == 5


# -- the command line ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_cli_reruns_the_unsucceeded_shards_or_those_named(live_server, ended, alice):
    token = create_token(alice, "rerun tests")[1]

    unsucceeded = run_cli(live_server.url, token, "resubmit", str(ended.pk),
                          "--shards", "unsucceeded")  # fmt: skip
    named = run_cli(live_server.url, token, "resubmit", str(ended.pk), "--shards", "0,4")
    wrong = run_cli(live_server.url, token, "resubmit", str(ended.pk), "--shards", "0,x")
    past = run_cli(live_server.url, token, "resubmit", str(ended.pk), "--shards", "7")

    assert unsucceeded.returncode == 0, unsucceeded.stderr
    first_id, state = unsucceeded.stdout.split()
    assert state == State.QUEUED
    assert [index for index, *_ in rows(Job.objects.get(pk=first_id))] == [1, 3]
    assert named.returncode == 0, named.stderr
    assert [index for index, *_ in rows(Job.objects.get(pk=named.stdout.split()[0]))] == [0, 4]
    assert wrong.returncode == 2 and "not unsucceeded nor indexes" in wrong.stderr
    assert past.returncode == 1 and "error 400" in past.stderr and "no shard 7" in past.stderr


@pytest.mark.django_db(transaction=True)
def test_the_cli_shows_a_rerun_batchs_logs_by_their_own_indexes(live_server, alice, alpha):
    token = create_token(alice, "rerun log tests")[1]
    spec = {"tenant": alpha, "owner": alice, "family": Family.BATCH_INFERENCE, "shards": 5}
    first = JobFactory(**spec, shard_index=1)
    for job in (first, JobFactory(**spec, parent=first, shard_index=3)):
        AttemptFactory(job=job).log_chunks.create(seq=0, text=f"shard {job.shard_index}")

    shown = run_cli(live_server.url, token, "logs", str(first.pk))
    third = run_cli(live_server.url, token, "logs", str(first.pk), "--shard", "3")
    missing = run_cli(live_server.url, token, "logs", str(first.pk), "--shard", "2")

    assert (shown.stdout, third.stdout) == ("[1.0] shard 1\n", "[1.0] shard 3\n")
    assert f"job {first.pk} is a batch of 2 (of 5) shards: showing shard 1's log" in shown.stderr
    assert f"--shard N shows shard N's (list them: list --batch {first.pk})" in shown.stderr
    assert missing.returncode == 1
    assert f"job {first.pk} has no shard 2 you may see: it runs 2 of the 5" in missing.stderr


def test_shards_an_earlier_rerun_still_runs_are_not_rerun_beside_it(ended, alice):
    first = rerun_batch(alice, ended)  # shards 1 and 3, queued

    again = rerun(alice, ended, [3])
    after = rerun(alice, ended, [0])  # one no rerun runs

    assert again.status_code == 400
    assert again.json()["shards"] == [
        f"Shard 3 of batch #{ended.pk} runs again already, as job "
        f"#{first.batch().get(shard_index=3).pk} (queued): wait for it to end, or cancel it."
    ]
    assert after.status_code == 201


@pytest.mark.django_db(transaction=True)
def test_a_rerun_sent_while_another_writes_the_same_shard_waits_for_it_and_is_refused(
    ended, alice, bob
):
    # Alice's rerun of shard 3 has written its job but not committed when Bob asks for the
    # same: asked without a lock, Bob saw no rerun of it and shard 3 ran twice.
    answer = {}

    def bobs_rerun():
        try:
            answer["job"] = actions.resubmit(bob, ended, shards=[3])[0]
        except ValidationError as refusal:
            answer["refused"] = refusal.detail["shards"][0]
        finally:
            connection.close()

    second = threading.Thread(target=bobs_rerun)
    with transaction.atomic():
        first, _ = actions.resubmit(alice, ended, shards=[3])
        second.start()
        second.join(timeout=1)
        assert second.is_alive(), answer  # waiting for Alice's commit
    second.join(timeout=10)

    assert answer == {
        "refused": f"Shard 3 of batch #{ended.pk} runs again already, as job "
        f"#{first.pk} (queued): wait for it to end, or cancel it."
    }
    assert Job.objects.filter(resubmitted_from=ended).count() == 1
