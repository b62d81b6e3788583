"""A test-only submission (Slurm's `sbatch --test-only`): what the scheduler would decide now
for a submission, and when its jobs would start, with nothing queued.

One placement over the live snapshot (snapshot.load) with the jobs the submission would make
added to the queue, built as submit builds them and read as the snapshot reads a stored job
(snapshot.row_of, snapshot.to_queued), under ids no stored job has that sort after every
stored job's, as a new job's id would: so they take their place in the real queue's order.
The Decision is only read: no job, event, pending reason, eviction or reservation is written.
What the core never sees, the answer says in its `notes`: a begin to come, dependencies not
met yet, a deadline the job could not end by if it started at its estimated start, its team's
placements paused by a platform admin.
"""

import time
from datetime import UTC, datetime, timedelta

from django.db import transaction

from clusters.models import Cluster
from jobs import actions, cycle, dependencies, reasons, snapshot
from jobs.models import Job
from jobs.placement import PLACED, PREEMPTS, Outcome, place
from jobs.placement.words import counted

# A stored job's id is digits: these sort after every one of them, a batch's in shard order.
TRIAL_ID = "trial-{:05d}"


def estimate(owner, tenant, spec: dict) -> dict:
    """What the scheduler would decide now for a submission by `owner` to `tenant` (`spec`: a
    SubmitSerializer's validated data, its tenant taken out), and when it would start.

    Raises the serializer's ValidationError where submit would refuse what the serializer
    cannot see: a tenant past its queued-jobs limit, a dependency already ended the wrong way.
    The idempotency key has no effect: nothing is stored under it.
    """
    spec = {key: value for key, value in spec.items() if key != "idempotency_key"}
    waits = spec.pop("depends_on", [])
    with transaction.atomic():  # the queue limit's turn, given back at once
        actions.check_queue_room(tenant, spec["shards"])
    dependencies.check(waits)
    now = time.time()
    created = datetime.fromtimestamp(now, tz=UTC)
    row = snapshot.row_of(Job(tenant=tenant, owner=owner, created=created, **spec))
    ids = [TRIAL_ID.format(index) for index in range(spec["shards"])]
    # A batch's shards name its first as their parent, as submit writes them: the core counts
    # them as one batch (its limit on shards running at once).
    first = ids[0]
    extra = [{**row, "id": pk, "parent_id": None if pk == first else first} for pk in ids]
    loaded = snapshot.load(now, extra=extra)
    outcomes = place(loaded.snapshot).by_job()
    back = created + timedelta(seconds=loaded.snapshot.policy.eviction_grace_s)
    names = {str(pk): name for pk, name in Cluster.objects.values_list("pk", "name")}
    jobs = [job_answer(index, outcomes[job_id], names, back) for index, job_id in enumerate(ids)]
    group = {"tenant_id": tenant.pk, "owner_id": owner.pk, "name": spec["name"]}
    waiting_for = dependencies.unmet_now(waits, spec["singleton"], group)
    return answer(jobs, spec, waiting_for, created, tenant.placements_paused)


def job_answer(index: int, outcome: Outcome, names: dict[str, str], back: datetime) -> dict:
    """One job of the submission (a batch's shard): the core's status, where it would go, and
    why it would wait, as the cycle would store it (cycle.explanation). A job that evicts
    work first starts once its victims have gone (`back`)."""
    reason, message, start = cycle.explanation(outcome, skipped=False)
    if outcome.status == PREEMPTS:  # nothing is stopped for a trial: said as what would be
        victims = counted(len(outcome.victims), "lower-priority job")
        message = (
            f"It would ask {victims} to stop, and start once "
            f"{'it has' if len(outcome.victims) == 1 else 'they have'} gone (the grace period: "
            f"about {cycle.utc_time(back)})."
        )
        start = back
    return {
        "shard_index": index,
        "status": outcome.status,
        "clusters": sorted({names[worker.cluster] for worker in outcome.workers}),
        "nodes": len({worker.node_id for worker in outcome.workers}),
        "workers": len(outcome.workers),  # an elastic gang's may be fewer than it asks
        "pending_reason": reason,
        "pending_message": message,
        "estimated_start": start,
    }


def answer(
    jobs: list[dict], spec: dict, waiting_for: list, now: datetime, paused: str = ""
) -> dict:
    """The submission's answer: whether every job of it starts now, when the last would start
    (None: no estimate), and what the core did not see (`paused`: why a platform admin paused
    its tenant's placements, which keeps it from starting however the core placed it)."""
    starts = [now if job["status"] == PLACED else job["estimated_start"] for job in jobs]
    start = None if None in starts or waiting_for or paused else max(starts)
    if paused:
        return {"starts_now": False, "estimated_start": None, "jobs": jobs,
                "notes": [reasons.paused_sentence(paused)]}  # fmt: skip
    begin, notes = spec["begin"], []
    if begin is not None:
        notes.append(cycle.not_yet(begin, begin)[1])
        start = None if start is None else max(start, begin)
    if waiting_for:
        notes.append(dependencies.sentence(waiting_for))
    if late := deadline_missed(spec, start):
        notes.append(late)
    return {
        "starts_now": start == now,
        "estimated_start": start,
        "notes": notes,
        "jobs": jobs,
    }


def deadline_missed(spec: dict, start: datetime | None) -> str:
    """Why the job could not end by its deadline if it started at `start`, "" if it could (or
    no start is known): it would be canceled while queued, before then."""
    deadline = spec["deadline"]
    if deadline is None or start is None:
        return ""
    end = start + timedelta(seconds=spec["max_runtime_s"])
    if end <= deadline:
        return ""
    return (
        f"Deadline {cycle.utc_time(deadline)}: started at its estimated start, "
        f"{cycle.utc_time(start)}, and running its max_runtime_s ({spec['max_runtime_s']} s), "
        "it could not end by then; it would be canceled while queued."
    )
