"""What a job is told of, changed after its submission (Slurm's `scontrol update MailType=
MailUser=`): `POST /api/v1/jobs/<id>/notifications/`, the job page's form and CLI `notify`,
while it has not ended; a batch through its first shard, every shard."""

# ruff: noqa: F811 (fixtures imported from other tests are the tests' arguments)

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import actions, time_limit_alerts
from jobs.models import Attempt, Job, JobEvent
from jobs.states import State
from tests.factories import JobFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_hold import viewer  # noqa: F401 (a fixture)
from tests.jobs.test_notify import BATCH, hooked, receiver, room  # noqa: F401 (fixtures)
from tests.jobs.test_notify_email import carol, mailbox  # noqa: F401 (fixtures)
from tests.jobs.test_notify_start import SPEC
from tests.jobs.test_notify_time_limit import running_for

pytestmark = pytest.mark.django_db


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def notifications(user, job, body):
    return client_of(user).post(f"/api/v1/jobs/{job.pk}/notifications/", body, format="json")


def test_a_queued_jobs_notifications_change_and_its_event_says_so(alpha, carol, mailbox):
    job = JobFactory(tenant=alpha, owner=carol, notify_requeue=True)

    answer = notifications(carol, job, {"notify_start": True, "notify_email": True})

    assert answer.status_code == 200, answer.json()
    told = {k: answer.json()[k] for k in actions.TOLD}
    assert told == {"notify_start": True, "notify_requeue": True, "notify_time_limit": False,
                    "notify_email": True}  # fmt: skip
    assert answer.json()["changed"] == 1
    event = JobEvent.objects.filter(job=job).last()
    assert event.reason == ("notifications changed by carol: its start on, email to its "
                            "submitter on")  # fmt: skip


def test_a_running_job_asked_now_is_warned_of_its_time_limit_by_the_next_check(
    hooked, alice, room, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=hooked, owner=alice, max_runtime_s=1000)
    running_for(job, 950)

    before = time_limit_alerts.check()
    notifications(alice, job, {"notify_time_limit": True})
    with django_capture_on_commit_callbacks(execute=False):
        after = time_limit_alerts.check()

    assert (before, after) == (0, 1)


def test_a_batch_changes_through_its_first_shard_alone(alpha, alice, room):
    first, _ = actions.submit(alice, alpha, {**BATCH, "shards": 3,
                                             "priority_class": first_class()})  # fmt: skip
    shard = first.batch().exclude(pk=first.pk).first()

    answer = notifications(alice, first, {"notify_requeue": True})
    of_shard = notifications(alice, shard, {"notify_requeue": False})
    warned = notifications(alice, first, {"notify_time_limit": True})

    assert answer.status_code == 200 and answer.json()["changed"] == 3
    assert set(first.batch().values_list("notify_requeue", flat=True)) == {True}
    assert of_shard.status_code == 409
    assert f"change the batch's notifications, #{first.pk}" in of_shard.json()["detail"]
    assert warned.status_code == 400 and list(warned.json()) == ["notify_time_limit"]


def first_class():
    from quotas.models import PriorityClass

    return PriorityClass.objects.get_or_create(name="normal", defaults={"value": 0})[0]


def test_an_ended_job_an_empty_change_and_an_address_missing_are_refused(alpha, alice, mailbox):
    ended = JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED)
    queued = JobFactory(tenant=alpha, owner=alice)

    over = notifications(alice, ended, {"notify_start": True})
    empty = notifications(alice, queued, {})
    no_address = notifications(alice, queued, {"notify_email": True})

    assert over.status_code == 409 and "has ended" in over.json()["detail"]
    assert empty.status_code == 400 and list(empty.json()) == ["non_field_errors"]
    assert no_address.status_code == 400
    (why,) = no_address.json()["notify_email"]
    assert why.startswith("Its submitter's account has no email address to send to")
    assert not Job.objects.get(pk=queued.pk).notify_email


def test_a_viewer_is_refused_and_another_team_gets_a_404(alpha, alice, viewer, charlie):
    job = JobFactory(tenant=alpha, owner=alice)

    by_viewer = notifications(viewer, job, {"notify_start": True})
    by_outsider = notifications(charlie, job, {"notify_start": True})

    assert (by_viewer.status_code, by_outsider.status_code) == (403, 404)
    assert not Job.objects.get(pk=job.pk).notify_start


def test_the_job_page_form_sets_the_boxes_ticked(alpha, carol, client, mailbox):
    job = JobFactory(tenant=alpha, owner=carol, notify_requeue=True)
    client.force_login(carol)
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    client.post(f"/jobs/{job.pk}/notifications/",
                {"notify_start": "true", "notify_email": "true"})  # fmt: skip

    job.refresh_from_db()
    assert 'id="notifications-form"' in page
    assert (job.notify_start, job.notify_requeue, job.notify_email) == (True, False, True)


def test_a_viewer_sees_no_form_to_change_them(alpha, alice, viewer, client):
    job = JobFactory(tenant=alpha, owner=alice)
    client.force_login(viewer)

    assert 'id="notifications-form"' not in client.get(f"/jobs/{job.pk}/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_cli_changes_them_and_says_what_is_told(cli):
    cli("submit", "-", "--notify-requeue", stdin=json.dumps(SPEC))
    job = Job.objects.get(name="told")

    done = cli("notify", str(job.pk), "--start", "--no-requeue")

    assert done.returncode == 0, done.stderr
    assert done.stdout == "its team's webhook is told of its end, its start (1 job)\n"
    job.refresh_from_db()
    assert (job.notify_start, job.notify_requeue) == (True, False)


def test_a_time_limit_told_is_not_told_again_when_asked_again(
    hooked, alice, room, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=hooked, owner=alice, max_runtime_s=1000, notify_time_limit=True)
    attempt = running_for(job, 950)
    Attempt.objects.filter(pk=attempt.pk).update(time_limit_told_at=timezone.now())

    notifications(alice, job, {"notify_time_limit": False})
    notifications(alice, job, {"notify_time_limit": True})

    assert time_limit_alerts.check(timezone.now() + timedelta(seconds=10)) == 0
