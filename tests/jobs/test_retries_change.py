"""What a job retries, changed while it has not ended (`POST /api/v1/jobs/<id>/retries/`, the
job page's form, CLI `retries`): its most retries, the exit codes of its own it retries, or
every failure of its own; its next failure follows them. A batch through its first shard."""

# ruff: noqa: F811 (fixtures imported from other tests are the tests' arguments)

import pytest
from rest_framework.test import APIClient

from jobs import actions
from jobs.models import Job, JobEvent
from jobs.states import State
from tests.factories import JobFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_hold import viewer  # noqa: F401 (a fixture)
from tests.jobs.test_min_workers_edit import portal_of
from tests.jobs.test_notify import BATCH, room  # noqa: F401 (fixtures)
from tests.jobs.test_notify_change import first_class
from tests.jobs.test_retry_exit_codes import exits, placed

pytestmark = pytest.mark.django_db


def change(user, job, body):
    client = APIClient()
    client.force_authenticate(user)
    return client.post(f"/api/v1/jobs/{job.pk}/retries/", body, format="json")


def test_a_running_jobs_next_failure_follows_the_exit_codes_set_while_it_ran(east, alice):
    job = placed(east, max_retries=0, owner=alice, tenant=alice.memberships.get().tenant)

    answer = change(alice, job, {"max_retries": 2, "retry_exit_codes": [134, 75]})
    failed_once = exits(job, 75)

    assert answer.status_code == 200, answer.json()
    assert (answer.json()["max_retries"], answer.json()["retry_exit_codes"]) == (2, [75, 134])
    assert (failed_once.state, failed_once.retries_used) == (State.QUEUED, 1)
    assert JobEvent.objects.filter(
        job=job, reason="retries changed by alice: at most 2, exit codes 75, 134"
    ).exists()


def test_fewer_retries_than_it_has_used_fail_it_at_its_next_failure(east, alice):
    job = placed(east, max_retries=3, retry_user_errors=True, owner=alice,
                 tenant=alice.memberships.get().tenant)  # fmt: skip
    Job.objects.filter(pk=job.pk).update(retries_used=1)

    change(alice, job, {"max_retries": 1})
    failed = exits(job, 3)

    assert failed.state == State.FAILED
    assert failed.events.last().reason == "worker 0 exited with code 3 (retries exhausted)"


def test_what_a_submission_refuses_and_an_ended_job_are_refused(alpha, alice):
    both = JobFactory(tenant=alpha, owner=alice, retry_exit_codes=[75])
    ended = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)

    kept_codes = change(alice, both, {"retry_user_errors": True})
    too_many = change(alice, both, {"max_retries": 21})
    no_code = change(alice, both, {"retry_exit_codes": [0]})
    empty = change(alice, both, {})
    over = change(alice, ended, {"max_retries": 5})
    dropped = change(alice, both, {"retry_user_errors": True, "retry_exit_codes": []})

    assert kept_codes.status_code == 400
    (why,) = kept_codes.json()["retry_exit_codes"]
    assert why.endswith("It keeps its exit codes: give [] too.")
    assert [r.status_code for r in (too_many, no_code, empty)] == [400, 400, 400]
    assert list(too_many.json()) == ["max_retries"] and list(no_code.json()) == ["retry_exit_codes"]
    assert over.status_code == 409 and "has ended" in over.json()["detail"]
    assert dropped.status_code == 200, dropped.json()
    row = Job.objects.get(pk=both.pk)
    assert (row.retry_user_errors, row.retry_exit_codes) == (True, [])


def test_a_batch_changes_through_its_first_shard_alone(alpha, alice, room):
    first, _ = actions.submit(alice, alpha, {**BATCH, "shards": 3,
                                             "priority_class": first_class()})  # fmt: skip
    shard = first.batch().exclude(pk=first.pk).first()

    answer = change(alice, first, {"max_retries": 5})
    of_shard = change(alice, shard, {"max_retries": 1})

    assert answer.json()["changed"] == 3
    assert set(first.batch().values_list("max_retries", flat=True)) == {5}
    assert of_shard.status_code == 409
    assert f"change the batch's retries, #{first.pk}" in of_shard.json()["detail"]


def test_a_viewer_is_refused_and_another_team_gets_a_404(alpha, alice, viewer, charlie):
    job = JobFactory(tenant=alpha, owner=alice, max_retries=3)

    by_viewer = change(viewer, job, {"max_retries": 9})
    by_outsider = change(charlie, job, {"max_retries": 9})

    assert (by_viewer.status_code, by_outsider.status_code) == (403, 404)
    assert Job.objects.get(pk=job.pk).max_retries == 3


def test_the_job_page_form_changes_them_and_says_a_refusal_on_the_field(alpha, alice, viewer):
    job = JobFactory(tenant=alpha, owner=alice, max_retries=3)
    portal = portal_of(alice)

    page = portal.get(f"/jobs/{job.pk}/").content.decode()
    url = f"/jobs/{job.pk}/retries/"
    done = portal.post(url, {"max_retries": "5", "retry_exit_codes": "75, 128-130"})
    refused = portal.post(url, {"max_retries": "5", "retry_exit_codes": "300"})

    assert 'id="retries-form"' in page
    assert 'id="retries-form"' not in portal_of(viewer).get(f"/jobs/{job.pk}/").content.decode()
    assert done.status_code == 302
    row = Job.objects.get(pk=job.pk)
    assert (row.max_retries, row.retry_exit_codes) == (5, [75, 128, 129, 130])
    assert refused.status_code == 400
    assert (
        'aria-invalid="true"' in refused.content.decode().split('id="retries-exit-codes"')[1][:300]
    )


def test_the_cli_changes_them_and_says_what_it_retries(mlsched, alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, max_retries=3, retry_exit_codes=[75])

    status, out, err = mlsched("retries", str(job.pk), "--max", "4", "--no-exit-codes",
                               "--user-errors")  # fmt: skip

    assert (status, out) == (0, "retries: 0 of 4 used (any failure) (1 job)\n"), err
    row = Job.objects.get(pk=job.pk)
    assert (row.max_retries, row.retry_exit_codes, row.retry_user_errors) == (4, [], True)


def test_a_batchs_ended_shards_keep_what_they_retried(alpha, alice, room):
    first, _ = actions.submit(alice, alpha, {**BATCH, "shards": 3,
                                             "priority_class": first_class()})  # fmt: skip
    ended = first.batch().exclude(pk=first.pk).first()
    Job.objects.filter(pk=ended.pk).update(state=State.SUCCEEDED)

    answer = change(alice, first, {"max_retries": 7})

    assert answer.json()["changed"] == 2
    assert Job.objects.get(pk=ended.pk).max_retries == 3  # as submitted
