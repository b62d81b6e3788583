"""The verbs of the job lifecycle. Views, admin actions, tasks and agents call these."""

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs import states
from jobs.models import Attempt, Job, JobEvent
from jobs.states import State


def _timestamps(target: str, now) -> dict:
    if target == State.SCHEDULED:
        return {"scheduled_at": now}
    if target == State.RUNNING:
        # Keep the first start: queue wait is measured from submit to first start.
        return {"started_at": Coalesce(F("started_at"), now)}
    if target in states.TERMINAL:
        return {"finished_at": now}
    return {}


@transaction.atomic
def transition(
    job: Job, target: str, reason: str = "", *, attempt: Attempt | None = None, now=None
) -> JobEvent:
    """Move `job` from the state it was read in to `target` and record the JobEvent.

    The update is conditional on the state the caller saw, so a job that moved underneath
    (a cancel racing a start) raises IllegalTransition instead of being overwritten.
    """
    source = job.state
    states.check(job.pk, source, target)
    now = now or timezone.now()
    fields = {"state": target, **_timestamps(target, now)}
    if target != State.QUEUED:
        fields.update(pending_reason="", pending_message="", estimated_start=None)
    if not Job.objects.filter(pk=job.pk, state=source).update(**fields):
        current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
        raise states.IllegalTransition(job.pk, current or source, target)
    job.refresh_from_db(fields=[f for f in fields if f != "state"] + ["state"])
    return JobEvent.objects.create(
        job=job, attempt=attempt, from_state=source, to_state=target, reason=reason, time=now
    )


@transaction.atomic
def cancel(job: Job, reason: str = "canceled by user") -> JobEvent | None:
    """Cancel a job. A live attempt is asked to stop; its agent ends it within the grace period.

    Canceling a job that has already ended does nothing and returns None.
    """
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.is_terminal:
        return None
    now = timezone.now()
    live = job.attempts.filter(outcome="").first()
    if live is not None:
        Attempt.objects.filter(pk=live.pk, stop_requested_at__isnull=True).update(
            stop_requested_at=now, stop_reason=Attempt.Outcome.CANCELED
        )
    return transition(job, State.CANCELED, reason, attempt=live, now=now)
