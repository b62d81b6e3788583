"""Notifications to a tenant's webhook (`Tenant.notify_url`, set by a platform admin): small JSON
documents the control plane POSTs; and the same notices of a job that asks for it
(`notify_email`, Slurm's --mail-user) emailed to its submitter, through MLSCHED_SMTP_URL. Job
ends (Slurm's --mail-type=END, what teams wire to Slack, Teams or PagerDuty): once per job; a
batch once, when its last shard has ended, with its shards counted by state. The first start of
a job that asks for it (`notify_start`, Slurm's --mail-type=BEGIN): once; a batch once, for its
shard that started first. Each requeue of a job that asks for it (`notify_requeue`, Slurm's
--mail-type=REQUEUE): a placed job stopped and queued again (preempted, drained, requeued,
retried after an infrastructure failure); a batch's shards queued again in one commit, once. The
thresholds of its GPU-hour budget and of its spend alert a tenant's month reaches are told the
same way (jobs.budget_alerts).

After the commit that ended them, `jobs_ended` (called by `jobs.events` for every end) picks
the ends that are due and queues a Celery task for each (`jobs.tasks.notify_job_end`), which
builds the notification (`job_end`) and posts it (`deliver`). Every kind goes the same way from
there (`queue`, `deliver`): signed with the tenant's secret as GitHub signs its webhooks, so a
receiver can check that it came from the control plane,
`X-Mlsched-Signature-256: sha256=<hex HMAC-SHA256 of the body, keyed with notify_secret>`, and
carrying its delivery id, `X-Mlsched-Delivery`, the same at every try of one notification, on
which a receiver drops one it has had.

An email is queued once per notification (its delivery id claimed in the shared cache), before
the webhook's post, so retrying the post does not send it again: a task of its own
(`jobs.tasks.mail_notification`), retried as a post is while the mail server cannot take it.

A notification that cannot be delivered is logged and dropped; the job never hears of it.
"""

import hashlib
import hmac
import json
import logging
import smtplib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TypedDict
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.core.cache import caches
from django.core.mail import EmailMessage
from django.db import connection
from django.db.models import F, Max, Min, Q
from django.urls import reverse
from django.utils import timezone

from jobs import efficiency
from jobs.costs import written
from jobs.models import Job, JobEvent
from jobs.placement.words import counted
from jobs.states import ACTIVE, State, batch_state
from quotas.models import Membership, Tenant

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Mlsched-Signature-256"
DELIVERY_HEADER = "X-Mlsched-Delivery"
TIMEOUT_S = (5.0, 5.0)  # to connect, and between bytes of the answer
# How long a batch's notification stays claimed: far longer than two ends committing together.
CLAIM_S = 24 * 3600
# A batch's shards queued again within this many seconds of the first are told together.
REQUEUE_GATHER_S = 30


class JobNotice(TypedDict):
    """What every notification of a job says first."""

    event: str  # "job.ended", "job.started", "job.requeued"
    job: int  # a batch: its first shard, which stands for it
    name: str
    tenant: str  # its slug
    owner: str  # the submitter's username
    labels: dict[str, str]  # the submitter's own labels


class JobEnded(JobNotice):
    state: str  # succeeded, failed or canceled (a batch: see states.batch_state)
    outcome: str  # the last attempt's outcome ("" when none ran)
    exit_code: int | None  # the last attempt's exit code
    reason: str  # why it ended, as its last event says
    started_at: str | None  # first start (a batch: its first shard's to start), ISO 8601
    finished_at: str | None  # (a batch: its last shard's end)
    url: str | None  # the job's page, under MLSCHED_PUBLIC_URL; None without it
    shards: dict[str, int] | None  # a batch: how many shards ended in each state
    shard: int | None  # a batch: the shard `outcome`, `exit_code` and `reason` are of
    # What that last attempt used of its request (jobs.efficiency; nulls when not measured):
    # cpu_seconds, memory_peak_mb, gpu_busy_seconds and their efficiencies, runtime_efficiency.
    used: dict[str, float | int | None] | None


class JobStarted(JobNotice):
    started_at: str  # its first start (a batch: its first shard's to start), ISO 8601
    waited_s: float  # from when it could run (eligible_at) to that start: its queue wait
    cluster: str | None  # where that attempt runs
    workers: int | None  # the workers it started with (an elastic gang: maybe fewer)
    url: str | None
    shards: int | None  # a batch: its shard count
    shard: int | None  # a batch: the shard that started first


class JobRequeued(JobNotice):
    requeued_at: str  # when it was queued again (a batch: its lowest shard told), ISO 8601
    outcome: str  # how it ended: preempted, lost, infra_error
    cause: str  # who stopped a preempted one (preemption, grow, requeue, drain, ...), else ""
    reason: str  # the attempt's end, as the job page says it
    attempt: int | None  # its number
    retries_used: int  # a preemption uses none; a retry after an infrastructure failure one
    max_retries: int
    url: str | None
    shards: int | None  # a batch: its shard count
    requeued_shards: list[int] | None  # a batch: the indices of those queued again at once


@dataclass(frozen=True)
class Notification:
    """A document for a tenant's webhook, and its delivery id: the same each time this
    notification is sent (retries included), so that a receiver can drop one it has had;
    `mail_to`, the addresses it is emailed to as well (none: not emailed)."""

    tenant: Tenant
    delivery: str  # "job.ended:42", "job.started:42", "budget.threshold:alpha:2026-12:80"
    document: Mapping[str, object]
    mail_to: tuple[str, ...] = ()


class Unreachable(Exception):
    """The receiver could not be reached, did not answer in time, or failed (a 5xx): worth
    another try."""


def told_of(path: str = "") -> Q:
    """The jobs someone is told of: their tenant has a webhook, or they ask to be emailed
    where the platform sends email (`path`: the way to the job from the rows filtered, "job__"
    from its attempts)."""
    hooked = ~Q(**{f"{path}tenant__notify_url": ""})
    return hooked | Q(**{f"{path}notify_email": True}) if settings.MLSCHED_SMTP_URL else hooked


def told(job: Job) -> bool:
    """Whether anyone is told of the job (told_of, of one job)."""
    return bool(job.tenant.notify_url) or bool(mail_to(job))


def mail_to(job: Job) -> tuple[str, ...]:
    """Where the job's notices are emailed: its submitter's address, if it asks."""
    asks = job.notify_email and settings.MLSCHED_SMTP_URL and job.owner.email
    return (job.owner.email,) if asks else ()


def owners_mailed() -> Q:
    """The tenants whose owners with an address are emailed what concerns the tenant itself
    (its budget): those that have such an owner, where the platform sends email."""
    if not settings.MLSCHED_SMTP_URL:
        return Q(pk__in=[])
    return Q(memberships__role=Membership.Role.OWNER, memberships__user__email__gt="")


def owners_of(tenant: Tenant) -> tuple[str, ...]:
    """The addresses of the tenant's owners (none where the platform sends no email)."""
    if not settings.MLSCHED_SMTP_URL:
        return ()
    found = tenant.memberships.filter(role=Membership.Role.OWNER).exclude(user__email="")
    return tuple(sorted(found.values_list("user__email", flat=True)))


# -- after commit: which ends are due -----------------------------------------------------


def jobs_ended(ended: list[tuple[int, int]]) -> None:
    """After the commit that ended these jobs, (job id, tenant id): queue the notifications
    due. Never raises: the jobs have ended whatever becomes of their notifications."""
    try:
        for job_id in due(ended):
            send(job_id)
    except Exception:
        log.exception("job-end notifications of %s were not queued", counted(len(ended), "job"))


def due(ended: list[tuple[int, int]]) -> list[int]:
    """The notifications these ends call for, by job id (a batch: its first shard's): the jobs
    someone is told of (told_of); a batch's shards only once the batch has no live shard left.
    One query per commit that ends jobs when nobody is told of them."""
    ids = [job_id for job_id, _ in ended]
    rows = Job.objects.filter(told_of(), pk__in=ids).values_list("pk", "parent_id", "shards")
    singles = [pk for pk, parent, shards in rows if parent is None and shards <= 1]
    batches = {parent or pk for pk, parent, shards in rows if parent is not None or shards > 1}
    return sorted(singles + [batch for batch in ended_batches(batches) if claim(batch)])


def jobs_started(started: list[tuple[int, int, datetime]]) -> None:
    """After the commit that started these jobs, (job id, tenant id, when): queue the start
    notifications due. Never raises, as jobs_ended."""
    try:
        for job_id in starts_due(started):
            queue_start(job_id)
    except Exception:
        log.exception("job-start notifications of %s were not queued", counted(len(started), "job"))


def hooked(moves: list[tuple[int, int, datetime]]) -> dict[int, datetime]:
    """{job id: when} of these moves, (job id, tenant id, when), of the jobs someone is told
    of (told_of)."""
    ids = [job_id for job_id, _, _ in moves]
    found = set(Job.objects.filter(told_of(), pk__in=ids).values_list("pk", flat=True))
    return {job_id: time for job_id, _, time in moves if job_id in found}


def starts_due(started: list[tuple[int, int, datetime]]) -> list[int]:
    """The start notifications these starts call for, by the id of the job that started: the
    first start of a job that asks for it (`notify_start`), someone told of it; a batch's
    once, for the shard that started first (the lowest id of those that started at once:
    `started_first`).
    A first start is one whose time is the job's `started_at`, which keeps the first: a
    retry's start is none."""
    if not (when := hooked(started)):
        return []
    rows = Job.objects.filter(pk__in=when, notify_start=True).values_list(
        "pk", "parent_id", "shards", "started_at"
    )
    firsts = [(pk, parent, shards) for pk, parent, shards, at in rows if at == when[pk]]
    singles = [pk for pk, parent, shards in firsts if parent is None and shards <= 1]
    of_batches = [
        pk
        for pk, parent, count in firsts
        if (parent is not None or count > 1) and started_first(pk, parent or pk, when[pk])
    ]
    return sorted(singles + of_batches)


def jobs_requeued(requeued: list[tuple[int, int, datetime]]) -> None:
    """After the commit that queued these placed jobs again, (job id, tenant id, when): queue
    the requeue notifications due. Never raises, as jobs_ended."""
    try:
        for job_id, since, gather, retries in requeues_due(requeued):
            queue(tasks_module().notify_job_requeue, job_id, since, retries, countdown=gather)
    except Exception:
        log.exception("requeue notifications of %s were not queued", counted(len(requeued), "job"))


def requeues_due(
    requeued: list[tuple[int, int, datetime]],
) -> list[tuple[int, float, float, int | None]]:
    """The requeue notifications these requeues call for, each (the job it tells of, since
    when, seconds to wait, its retries used as the requeue left them): a job that asks for it
    (`notify_requeue`), someone told of it, at once; a batch (its first shard) once for its
    shards queued again within REQUEUE_GATHER_S of the first (`claim_requeue`), after that
    time, when they have been (its retries used read then: None)."""
    if not (when := hooked(requeued)):
        return []
    rows = Job.objects.filter(pk__in=when, notify_requeue=True).values_list(
        "pk", "parent_id", "shards", "retries_used"
    )
    singles, batches = [], {}
    for pk, parent, shards, retries in rows:
        if parent is None and shards <= 1:
            singles.append((pk, when[pk].timestamp(), 0.0, retries))
        else:  # a shard goes with its batch (its first shard's id), from its earliest
            batch = parent or pk
            batches[batch] = min(batches.get(batch, when[pk]), when[pk])
    gathered = [(batch, at.timestamp(), float(REQUEUE_GATHER_S), None)
                for batch, at in sorted(batches.items()) if claim_requeue(batch)]  # fmt: skip
    return sorted(singles) + gathered


def claim_requeue(batch: int) -> bool:
    """Whether this commit opens a gathering of the batch's requeues (none is open): the first
    to add `requeued-batch-<id>` to the shared cache for REQUEUE_GATHER_S tells of them."""
    return caches["shared"].add(f"requeued-batch-{batch}", 1, REQUEUE_GATHER_S)


def started_first(shard: int, batch: int, at: datetime) -> bool:
    """Whether no shard of the batch (its first shard's id) started before the shard that
    started `at`, nor at that time with a lower id. One query by the batch's index, which
    stops at the first earlier shard found: for a batch's later shards, soon."""
    return not (
        Job.objects.filter(Q(pk=batch) | Q(parent_id=batch))
        .filter(Q(started_at__lt=at) | Q(started_at=at, pk__lt=shard))
        .exists()
    )


def ended_batches(batches: set[int]) -> list[int]:
    """Those of these batches (first shard ids) with no shard left that has not ended."""
    if not batches:
        return []
    live = Job.objects.live().filter(Q(pk__in=batches) | Q(parent_id__in=batches))
    still = {parent or pk for pk, parent in live.values_list("pk", "parent_id")}
    return sorted(batches - still)


def claim(batch: int) -> bool:
    """Whether this commit notifies the batch's end. Two shards' ends committed at once each
    see the batch ended after their commit: the first to claim it sends, once (an atomic add
    to the shared cache, Redis's SET NX)."""
    return caches["shared"].add(f"notified-batch-{batch}", 1, CLAIM_S)


def send(job_id: int) -> None:
    """Queue the notification of job `job_id`'s end."""
    queue(tasks_module().notify_job_end, job_id)


def queue_start(job_id: int) -> None:
    """Queue the notification of job `job_id`'s first start (a batch's shard: its batch's)."""
    queue(tasks_module().notify_job_start, job_id)


def tasks_module():
    """jobs.tasks, which imports this module."""
    from jobs import tasks

    return tasks


def queue(task, *args: float | str | list[str] | None, countdown: float = 0.0) -> None:
    """Send a notification's task (jobs.tasks) with the arguments it takes, to the worker; run
    `countdown` seconds from now."""
    if not task.app.conf.task_always_eager:
        if countdown:
            task.apply_async(args=args, countdown=countdown)
        else:
            task.delay(*args)
        return
    # The embedded mode has no worker: the task would run inside the request or cycle that
    # queued it, timeouts and retries included. A thread of its own runs it.
    runs = threading.Thread(target=run_here, args=(task, args, countdown), name="notify",
                            daemon=True)  # fmt: skip
    runs.start()


def run_here(task, args: tuple, countdown: float = 0.0) -> None:
    time.sleep(countdown)
    try:
        task.apply(args=args)
    finally:
        connection.close()  # this thread's own


# -- the tasks: build, sign, post -----------------------------------------------------------


def job_end(job_id: int) -> Notification | None:
    """The notification of job `job_id`'s end (a batch: its first shard's); None when there is
    nothing to send: the job deleted since, or nobody to tell now (its tenant's URL removed
    since, and no email asked)."""
    job = Job.objects.select_related("tenant", "owner").filter(pk=job_id).first()
    if job is None or not told(job):
        return None
    return Notification(job.tenant, f"job.ended:{job.pk}", document(job), mail_to(job))


def job_start(job_id: int) -> Notification | None:
    """The notification of job `job_id`'s first start (a batch's shard: its batch's, named by
    its first shard); None when there is nothing to send, as job_end."""
    started = Job.objects.select_related("tenant", "owner").filter(pk=job_id).first()
    if started is None or not told(started):
        return None
    job = started
    if started.parent_id is not None:
        job = Job.objects.select_related("tenant", "owner").get(pk=started.parent_id)
    attempt = started.attempts.select_related("cluster").order_by("-number").first()
    waited = started.started_at - (started.eligible_at or started.created)
    document = JobStarted(
        event="job.started", job=job.pk, name=job.name, tenant=job.tenant.slug,
        owner=job.owner.get_username(), labels=job.labels,
        started_at=started.started_at.isoformat(),
        waited_s=round(max(waited.total_seconds(), 0.0), 3),
        cluster=attempt.cluster.name if attempt and attempt.cluster else None,
        workers=attempt.workers if attempt else None,
        url=portal_url(reverse("job", args=[job.pk])),
        shards=job.shards if job.is_batch else None,
        shard=started.shard_index if job.is_batch else None,
    )  # fmt: skip
    return Notification(job.tenant, f"job.started:{job.pk}", document, mail_to(job))


def job_requeue(job_id: int, since: float, retries_used: int | None = None) -> Notification | None:
    """The notification of job `job_id`'s requeue at `since` (epoch seconds), from its event;
    of a batch (its first shard), of its shards queued again from then to REQUEUE_GATHER_S
    after, the lowest one's first event telling how. `retries_used` as the requeue left them
    (None: the lowest one's row's now). None when there is nothing to send: the job deleted
    since, nobody to tell now, or no such event kept."""
    job = Job.objects.select_related("tenant", "owner").filter(pk=job_id).first()
    if job is None or not told(job):
        return None
    start = datetime.fromtimestamp(since, tz=UTC) - timedelta(milliseconds=1)  # its float
    moves = JobEvent.objects.filter(job__in=job.batch().values("pk"), from_state__in=ACTIVE,
                                    to_state=State.QUEUED, time__gte=start)  # fmt: skip
    if job.is_batch:
        moves = moves.filter(time__lt=start + timedelta(seconds=REQUEUE_GATHER_S))
    firsts: dict[int, JobEvent] = {}
    for move in moves.select_related("job", "attempt").order_by("time", "id"):
        firsts.setdefault(move.job_id, move)
    if not firsts:
        return None
    lowest = firsts[min(firsts)]
    stopped = lowest.attempt
    document = JobRequeued(
        event="job.requeued", job=job.pk, name=job.name, tenant=job.tenant.slug,
        owner=job.owner.get_username(), labels=job.labels,
        requeued_at=lowest.time.isoformat(),
        outcome=stopped.outcome if stopped else "", cause=stopped.stop_cause if stopped else "",
        reason=stopped.reason if stopped else lowest.reason,
        attempt=stopped.number if stopped else None,
        retries_used=lowest.job.retries_used if retries_used is None else retries_used,
        max_retries=lowest.job.max_retries, url=portal_url(reverse("job", args=[job.pk])),
        shards=job.shards if job.is_batch else None,
        requeued_shards=sorted(m.job.shard_index for m in firsts.values()) if job.is_batch
        else None,
    )  # fmt: skip
    return Notification(job.tenant, f"job.requeued:{job.pk}:{lowest.pk}", document, mail_to(job))


def deliver(notification: Notification | None) -> None:
    """Queue the notification's email, the first time (None: nothing to send), then post it
    to its tenant's URL, if it has one. Raises Unreachable for a failure worth another try;
    any other answer is final: a 2xx delivered, a redirect (not followed) or a 4xx logged and
    dropped."""
    if notification is None:
        return
    if notification.mail_to and claim_mail(notification.delivery):
        subject, body = mail_text(notification.document)
        args = (notification.delivery, list(notification.mail_to), subject, body)
        queue(tasks_module().mail_notification, *args)
    if notification.tenant.notify_url:
        body = encode(payload(notification.tenant.notify_format, notification.document))
        post(notification.tenant, body, notification.delivery)


# A Discord message's most characters.
DISCORD_CONTENT = 2000


def payload(form: str, document: Mapping[str, object]) -> dict:
    """What a tenant's URL is sent in its notification format (`Tenant.notify_format`): the
    document with its line as `text` (Slack's and Mattermost's incoming webhooks show it); for
    a Microsoft Teams Workflows webhook, an Adaptive Card of the line, the document's fields as
    facts (as the email lists them) and a button to the job, the document beside it
    (`mlsched`, for the flow's own conditions); for Discord, the line as
    the message, mentioning nobody (a job's name written `@everyone` pings no one)."""
    if form == Tenant.NotifyFormat.TEAMS:
        link = document.get("url")
        listed = [{"title": key, "value": shown} for key, shown in facts(document)]
        card = {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": [
                {"type": "TextBlock", "text": headline(document), "wrap": True},
                {"type": "FactSet", "facts": listed},
            ],
            "actions": [{"type": "Action.OpenUrl", "title": "Open in mlsched", "url": link}]
            if link
            else [],
        }
        attachment = {
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": None,
            "content": card,
        }
        return {"type": "message", "attachments": [attachment], "mlsched": dict(document)}
    if form == Tenant.NotifyFormat.DISCORD:
        return {"content": summary(document)[:DISCORD_CONTENT], "allowed_mentions": {"parse": []}}
    return {**document, "text": summary(document)}


def claim_mail(delivery: str) -> bool:
    """Whether this try of the notification emails it: the first to add `mailed-<delivery>`
    to the shared cache does (a retried post, or the task run twice, finds it there)."""
    return caches["shared"].add(f"mailed-{delivery}", 1, CLAIM_S)


def document(job: Job) -> JobEnded:
    """What a receiver is told of the end of `job`, a single job or a batch's first shard."""
    shards = job.shard_states() if job.is_batch else None
    state = batch_state(shards) if shards else job.state
    told = job
    if shards:  # the batch's lowest shard that ended as the batch did: its first failure
        told = job.batch().filter(state=state).order_by("shard_index", "pk").first() or job
    attempt = told.attempts.order_by("-number").first()
    end = told.events.filter(to_state=told.state).exclude(from_state=F("to_state")).last()
    started, finished = job.started_at, job.finished_at
    if shards:
        times = job.batch().aggregate(started=Min("started_at"), finished=Max("finished_at"))
        started, finished = times["started"], times["finished"]
    return JobEnded(
        event="job.ended", job=job.pk, name=job.name, tenant=job.tenant.slug,
        owner=job.owner.get_username(), labels=job.labels, state=state,
        outcome=attempt.outcome if attempt else "",
        exit_code=attempt.exit_code if attempt else None,
        reason=end.reason if end else "",
        started_at=started.isoformat() if started else None,
        finished_at=finished.isoformat() if finished else None,
        url=portal_url(reverse("job", args=[job.pk])), shards=shards,
        shard=told.shard_index if shards else None,
        used=used_by(attempt, told),
    )  # fmt: skip


def used_by(attempt, job) -> dict | None:
    """The attempt's use of its job's request, as the job-end document gives it."""
    if attempt is None:
        return None
    figures = efficiency.of_attempt(attempt, job, timezone.now()).document()
    return {k: figures[k] for k in USED}


USED = ("cpu_seconds", "memory_peak_mb", "gpu_busy_seconds", "cpu_efficiency",
        "memory_efficiency", "runtime_efficiency", "gpu_efficiency")  # fmt: skip


def portal_url(path: str) -> str | None:
    """The portal's `path`, absolute under MLSCHED_PUBLIC_URL; None without it."""
    base = settings.MLSCHED_PUBLIC_URL
    return f"{base.rstrip('/')}{path}" if base else None


def encode(document: Mapping[str, object]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def signature(secret: str, body: bytes) -> str:
    """The signature header's value: what a receiver computes from the body it got and the
    tenant's secret, and compares (in constant time) with the header."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post(tenant: Tenant, body: bytes, delivery: str) -> None:
    """POST `body` to the tenant's URL, once; see deliver."""
    # Logged by host only: the URL's path or query often is the receiver's token (Slack's).
    host = urlsplit(tenant.notify_url).hostname
    which = f"notification {delivery} for tenant {tenant.slug}"
    headers = {"Content-Type": "application/json", "User-Agent": "mlsched",
               SIGNATURE_HEADER: signature(tenant.signing_secret(), body),
               DELIVERY_HEADER: delivery}  # fmt: skip
    try:
        # Not streamed in: only the status matters, whatever the receiver answers with.
        with requests.post(tenant.notify_url, data=body, headers=headers, timeout=TIMEOUT_S,
                           allow_redirects=False, stream=True) as answer:  # fmt: skip
            status = answer.status_code
    except (requests.ConnectionError, requests.Timeout) as error:
        # Its message names the whole URL: only its kind is told, and the chain is cut.
        failure = f"{host}: {type(error).__name__}"
        log.warning("%s: %s", which, failure)
        raise Unreachable(failure) from None
    except requests.RequestException as error:
        log.warning("%s: not sent to %s (%s)", which, host, type(error).__name__)
        return
    if status >= 500:
        log.warning("%s: %s answered %d", which, host, status)
        raise Unreachable(f"{host} answered {status}")
    if status >= 300:
        log.warning("%s: %s answered %d; dropped, not sent again", which, host, status)


# -- email ----------------------------------------------------------------------------------

# An email's subject, by its notification's event.
SUBJECTS = {
    "job.ended": lambda d: f"{job(d)} {d['state']}" + (f": {d['reason']}" if d["reason"] else ""),
    "job.started": lambda d: f"{job(d)} started" + (f" on {d['cluster']}" if d["cluster"] else ""),
    "job.requeued": lambda d: f"{job(d)} queued again" + (f": {d['reason']}" if d["reason"]
                                                          else ""),
    "job.time_limit": lambda d: f"{job(d)} has used {d['percent']} % of its runtime limit",
    "budget.threshold": lambda d: (f"Team {d['tenant']} has used {d['percent']} % of its "
                                   f"GPU-hour budget for {d['month']}"),
    "tenant.spend": lambda d: spend(d),
}  # fmt: skip


def spend(document: Mapping[str, object]) -> str:
    """A spend alert's line, with the share of it spent, whole percent down: "Team alpha has
    spent 81 % of its 1,000.00 USD spend alert this month (812.40 USD)."."""
    budget, spent = Decimal(str(document["budget"])), Decimal(str(document["spent"]))
    currency = str(document["currency"])
    return (f"Team {document['tenant']} has spent {int(spent * 100 / budget)} % of its "
            f"{written(budget, currency)} spend alert this month "
            f"({written(spent, currency)}).")  # fmt: skip


def job(document: Mapping[str, object]) -> str:
    return f"Job #{document['job']} {document['name']}"


def summary(document: Mapping[str, object]) -> str:
    """The notification in a line, and its link: the `text` every posted document carries, which
    Slack's and Mattermost's incoming webhooks show as the message ("Job #42 train-llm failed:
    exit code 3 https://mlsched.example.com/jobs/42/")."""
    line = headline(document)
    return f"{line} {document['url']}" if document.get("url") else line


def headline(document: Mapping[str, object]) -> str:
    """The notification in a line, without its link: "Job #42 train-llm failed: exit code 3"."""
    return " ".join(SUBJECTS[str(document["event"])](document).split())


def facts(document: Mapping[str, object]) -> list[tuple[str, str]]:
    """The document's fields that say something, each written as text: those with a value,
    but the event and the link (the line and the button say them), objects and lists in
    JSON."""
    return [
        (key, json.dumps(value) if isinstance(value, dict | list) else str(value))
        for key, value in document.items()
        if key not in ("event", "url") and value is not None and value != ""
    ]


def mail_text(document: Mapping[str, object]) -> tuple[str, str]:
    """An email's subject and plain-text body for a notification: what happened in the
    subject ("Job #42 train-llm failed: exit code 3"), then the document a field a line, its
    link first."""
    subject = SUBJECTS[str(document["event"])](document)
    lines = [subject, ""]
    if document.get("url"):
        lines += [str(document["url"]), ""]
    lines += [f"{key}: {shown}" for key, shown in facts(document)]
    # One line: a job's name or reason cannot add headers.
    return " ".join(subject.split())[:200], "\n".join(lines) + "\n"


def mail(delivery: str, to: list[str], subject: str, body: str) -> None:
    """Email a notification once to these addresses, through MLSCHED_SMTP_URL, with its
    delivery id in `X-Mlsched-Delivery`. Raises Unreachable while the server cannot take it
    (not reached, or a 4xx: try later); a 5xx refusal is logged and dropped."""
    which = f"email of notification {delivery}"
    message = EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, to,
                           headers={DELIVERY_HEADER: delivery})  # fmt: skip
    try:
        message.send()
    except smtplib.SMTPRecipientsRefused as error:
        codes = [code for code, _ in error.recipients.values()]
        final(which, f"recipient refused ({', '.join(map(str, codes))})", min(codes))
    except smtplib.SMTPResponseException as error:
        final(which, f"answered {error.smtp_code}", error.smtp_code)
    except (OSError, smtplib.SMTPException) as error:  # not reached, cut off, timed out
        log.warning("%s: %s", which, type(error).__name__)
        raise Unreachable(f"mail server: {type(error).__name__}") from None


def final(which: str, failure: str, code: int) -> None:
    """A mail server's refusal: worth another try if temporary (4xx), else dropped."""
    if 400 <= code < 500:
        log.warning("%s: %s", which, failure)
        raise Unreachable(f"mail server {failure}")
    log.warning("%s: %s; dropped, not sent again", which, failure)
