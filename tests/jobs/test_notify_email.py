"""Email to a job's submitter (Slurm's --mail-user): a job that asks (`notify_email`) has what
its team's webhook is told of it emailed to its submitter too, webhook or not, once per
notification, through the platform's mail server (MLSCHED_SMTP_URL). A real SMTP server
(aiosmtpd) in a thread plays the mail server."""

# ruff: noqa: F811 (the job-end tests' fixtures, imported, are the tests' arguments)

import json
from datetime import timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage

import pytest
from aiosmtpd.controller import Controller
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import actions, budget_alerts, notify, tasks, time_limit_alerts
from jobs.cli import describe
from jobs.models import Attempt, Job
from mlsched_site.settings import smtp_settings
from quotas.models import Membership
from tests.factories import JobFactory, MembershipFactory, PriorityClassFactory, UserFactory
from tests.jobs.test_budget_alerts import NOW, budget, used
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_notify import end, hooked, receiver, room, run_when_sent  # noqa: F401
from tests.jobs.test_notify_start import FORM, SPEC, placed, starts
from tests.processes import free_port

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


class Mailbox:
    """An SMTP server's handler: it keeps each message it accepts, or answers `refusal`
    ("451 ..." for a moment, "550 ..." for good) to the message's data."""

    def __init__(self):
        self.messages: list[tuple[str, list[str], EmailMessage]] = []
        self.refusal = ""
        self.tries = 0

    async def handle_DATA(self, server, session, envelope):
        self.tries += 1
        if self.refusal:
            return self.refusal
        message = message_from_bytes(envelope.original_content, policy=policy.default)
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 OK"


@pytest.fixture
def mailbox(settings):
    """A mail server on this host, which the platform is set to send through."""
    box = Mailbox()
    server = Controller(box, hostname="127.0.0.1", port=free_port())
    server.start()
    url = f"smtp://127.0.0.1:{server.port}"
    host, port, user, password, starttls, tls = smtp_settings(url)
    settings.MLSCHED_SMTP_URL = url
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"  # not the test one
    settings.EMAIL_HOST, settings.EMAIL_PORT = host, port
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = user, password
    settings.EMAIL_USE_TLS, settings.EMAIL_USE_SSL = starttls, tls
    settings.DEFAULT_FROM_EMAIL = "mlsched@mlsched.example.com"
    yield box
    server.stop()


@pytest.fixture
def mailed(monkeypatch):
    """The delivery ids whose email was queued; each runs at once, as a worker would run it
    (retries included, without their waits)."""
    sent: list[str] = []

    def delay(*args):
        sent.append(args[0])
        tasks.mail_notification.apply(args=args)

    monkeypatch.setattr(tasks.mail_notification, "delay", delay)
    return sent


@pytest.fixture
def carol(alpha):
    """Alpha's member with an email address."""
    user = UserFactory(username="carol", email="carol@example.com")
    MembershipFactory(tenant=alpha, user=user, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def ends(monkeypatch):
    """The job ids whose end notification was queued; each runs at once."""
    return run_when_sent(monkeypatch, tasks.notify_job_end)


def running(job: Job) -> Job:
    starts_now = placed(job)
    actions.mark_running(starts_now.pk)
    return Job.objects.get(pk=job.pk)


def test_a_job_that_asks_has_its_end_emailed_to_its_submitter_without_a_webhook(
    alpha, carol, room, mailbox, mailed, ends, django_capture_on_commit_callbacks, settings
):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"
    job = running(JobFactory(tenant=alpha, owner=carol, name="train-llm", notify_email=True))

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.USER_ERROR, exit_code=3)

    ((sender, to, message),) = mailbox.messages
    assert (ends, mailed) == ([job.pk], [f"job.ended:{job.pk}"])
    assert (sender, to) == ("mlsched@mlsched.example.com", ["carol@example.com"])
    assert message["Subject"] == f"Job #{job.pk} train-llm failed: exit code 3"
    assert message["X-Mlsched-Delivery"] == f"job.ended:{job.pk}"
    body = message.get_content().replace("\r\n", "\n")
    assert f"https://mlsched.example.com/jobs/{job.pk}/" in body
    assert "state: failed\n" in body and "exit_code: 3\n" in body and "owner: carol\n" in body


def test_a_job_that_does_not_ask_is_not_emailed_nor_queued_without_a_webhook(
    alpha, carol, room, mailbox, mailed, ends, django_capture_on_commit_callbacks
):
    job = running(JobFactory(tenant=alpha, owner=carol))

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.SUCCEEDED, exit_code=0)

    assert (ends, mailed, mailbox.messages) == ([], [], [])


def test_without_a_mail_server_since_nothing_is_queued_for_a_job_that_asked(
    alpha, carol, room, ends, django_capture_on_commit_callbacks, settings
):
    settings.MLSCHED_SMTP_URL = ""  # taken away after the job asked
    job = running(JobFactory(tenant=alpha, owner=carol, notify_email=True))

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.SUCCEEDED, exit_code=0)

    assert ends == []


def test_the_webhook_and_the_email_both_hear_and_a_retried_post_emails_once(
    hooked, carol, room, receiver, mailbox, mailed
):
    receiver.status = 503
    job = JobFactory(tenant=hooked, owner=carol, state="failed", notify_email=True)

    result = tasks.notify_job_end.apply(args=(job.pk,))

    assert len(receiver.received) == 1 + tasks.notify_job_end.max_retries
    assert isinstance(result.result, notify.Unreachable)
    assert mailed == [f"job.ended:{job.pk}"] and len(mailbox.messages) == 1


def test_its_start_and_its_time_limit_are_emailed_as_it_asks(
    alpha, carol, room, mailbox, mailed, monkeypatch, django_capture_on_commit_callbacks
):
    run_when_sent(monkeypatch, tasks.notify_job_start)
    run_when_sent(monkeypatch, tasks.notify_time_limit)
    job = JobFactory(tenant=alpha, owner=carol, name="train-llm", max_runtime_s=1000,
                     notify_email=True, notify_start=True, notify_time_limit=True)  # fmt: skip
    attempt = placed(job)
    starts(attempt, django_capture_on_commit_callbacks)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=timezone.now() - timedelta(seconds=901))

    with django_capture_on_commit_callbacks(execute=True):
        told = time_limit_alerts.check()

    subjects = [message["Subject"] for _, _, message in mailbox.messages]
    assert told == 1
    assert mailed == [f"job.started:{job.pk}", f"job.time_limit:{attempt.pk}"]
    assert subjects == [
        f"Job #{job.pk} train-llm started on {room.cluster.name}",
        f"Job #{job.pk} train-llm has used 90 % of its runtime limit",
    ]


def test_a_mail_server_refusing_for_now_is_tried_again_and_for_good_is_not(mailbox):
    mailbox.refusal = "451 4.3.0 Try again later"
    with pytest.raises(notify.Unreachable, match="451"):
        notify.mail("job.ended:1", ["carol@example.com"], "Job #1 x failed", "body\n")

    mailbox.refusal = "550 5.1.1 No such user"
    notify.mail("job.ended:1", ["carol@example.com"], "Job #1 x failed", "body\n")  # dropped

    assert (mailbox.tries, mailbox.messages) == (2, [])


def test_a_mail_server_not_answering_is_tried_again(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nothing listens

    with pytest.raises(notify.Unreachable, match="ConnectionRefusedError"):
        notify.mail("job.ended:1", ["carol@example.com"], "Job #1 x failed", "body\n")


def test_the_mail_task_is_tried_as_the_webhooks_are(mailbox):
    mailbox.refusal = "421 4.7.0 Too busy"

    result = tasks.mail_notification.apply(args=("job.ended:1", ["c@example.com"], "s", "b"))

    assert isinstance(result.result, notify.Unreachable)
    assert mailbox.tries == 1 + tasks.mail_notification.max_retries
    assert tasks.mail_notification.autoretry_for == tasks.notify_job_end.autoretry_for


def test_a_budget_threshold_is_emailed_to_the_teams_owners_with_an_address(
    alpha, alice, bob, carol, mailbox, mailed, monkeypatch, django_capture_on_commit_callbacks
):
    # Carol owns alpha and has an address; Alice owns it without one; Bob is a member.
    UserFactory._meta.model.objects.filter(pk=bob.pk).update(email="bob@example.com")
    run_when_sent(monkeypatch, tasks.notify_budget)
    budget(alpha, 10)
    used(alpha, 8.5)

    with django_capture_on_commit_callbacks(execute=True):
        claimed = budget_alerts.check(NOW)

    ((_, to, message),) = mailbox.messages
    assert (claimed, mailed) == (1, ["budget.threshold:alpha:2026-12:80"])
    assert to == ["carol@example.com"]
    assert message["Subject"] == "Team alpha has used 80 % of its GPU-hour budget for 2026-12"


def test_a_budget_is_not_watched_without_a_webhook_or_an_owner_to_email(
    alpha, alice, mailbox, mailed, monkeypatch, django_capture_on_commit_callbacks
):
    sent = run_when_sent(monkeypatch, tasks.notify_budget)
    budget(alpha, 10)
    used(alpha, 8.5)

    with django_capture_on_commit_callbacks(execute=True):
        claimed = budget_alerts.check(NOW)

    assert (claimed, sent, mailed) == (0, [], [])


def test_a_name_or_reason_of_several_lines_is_one_subject_line():
    subject, body = notify.mail_text({"event": "job.ended", "job": 7, "name": "a\r\nBcc: x",
                                      "state": "failed", "reason": "exit code 1\nTo: y",
                                      "url": None, "labels": {"k": "v"}})  # fmt: skip

    assert subject == "Job #7 a Bcc: x failed: exit code 1 To: y"
    assert 'labels: {"k": "v"}' in body and "url" not in body


def test_the_api_takes_it_and_gives_it_back_in_the_job_and_its_spec(alpha, carol, mailbox):
    PriorityClassFactory(name="normal")
    client = APIClient()
    client.force_authenticate(carol)
    body = {**SPEC, "notify_email": True}

    job = client.post("/api/v1/jobs/", body, format="json").json()
    spec = client.get(f"/api/v1/jobs/{job['id']}/spec/").json()

    assert job["notify_email"] is True and spec["notify_email"] is True
    assert Job.objects.get(pk=job["id"]).notify_email


def test_it_is_refused_naming_it_without_a_mail_server_or_an_address(alpha, alice, carol,
                                                                        settings):  # fmt: skip
    PriorityClassFactory(name="normal")
    client = APIClient()
    body = {**SPEC, "notify_email": True}
    settings.MLSCHED_SMTP_URL = ""
    client.force_authenticate(carol)
    no_server = client.post("/api/v1/jobs/", body, format="json")
    settings.MLSCHED_SMTP_URL = "smtp://127.0.0.1"
    client.force_authenticate(alice)  # no address
    no_address = client.post("/api/v1/jobs/", body, format="json")

    assert no_server.status_code == no_address.status_code == 400
    assert no_server.json() == {"notify_email": [
        "This platform sends no email: its admins have set no mail server."]}  # fmt: skip
    assert no_address.json() == {"notify_email": [
        "Your account has no email address to send to: set it at /accounts/email/ (or a "
        "platform admin does)."]}  # fmt: skip
    assert not Job.objects.exists()


def test_the_submit_form_takes_it_and_the_job_page_says_it(alpha, carol, client, mailbox):
    PriorityClassFactory(name="normal")
    client.force_login(carol)
    form = client.get("/jobs/new/").content.decode()
    client.post("/jobs/new/", {**FORM, "notify_start": "true", "notify_email": "true"})
    job = Job.objects.get(name="x")
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert "To carol@example.com, as Slurm's --mail-user" in form
    assert job.notify_email
    assert '<dd id="emails">its submitter: its end, its start</dd>' in page


def test_the_submit_form_says_why_it_cannot_email(alpha, alice, client, settings):
    settings.MLSCHED_SMTP_URL = "smtp://127.0.0.1"
    client.force_login(alice)

    form = client.get("/jobs/new/").content.decode()

    assert 'name="notify_email" value="true"  disabled' in form
    assert "Your account has no email address to send to" in form


@pytest.mark.django_db(transaction=True)
def test_the_cli_submits_it_and_its_status_says_it(cli, alice, mailbox):
    alice.email = "alice@example.com"
    alice.save(update_fields=["email"])

    done = cli("submit", "-", "--notify-email", stdin=json.dumps(SPEC))
    job = Job.objects.get(name="told")
    described = cli("status", str(job.pk))

    assert done.returncode == 0, done.stderr
    assert job.notify_email and json.loads(described.stdout)["notify_email"] is True
    # As `status` describes it on a terminal.
    said = dict(describe.fields(json.loads(described.stdout)))["Emails"]
    assert said == "its submitter, what its team's webhook is told"


@pytest.mark.parametrize(
    "url, read",
    [
        ("smtp://mail.example.com", ("mail.example.com", 25, "", "", False, False)),
        ("smtp+starttls://u%40x:p%3Aw@mail.example.com",
         ("mail.example.com", 587, "u@x", "p:w", True, False)),
        ("smtps://mail.example.com:2465", ("mail.example.com", 2465, "", "", False, True)),
    ],
)  # fmt: skip
def test_the_mail_server_is_read_from_its_url(url, read):
    assert smtp_settings(url) == read


def test_a_mail_server_url_of_another_kind_is_refused_at_start():
    with pytest.raises(ImproperlyConfigured, match="MLSCHED_SMTP_URL"):
        smtp_settings("http://mail.example.com")
