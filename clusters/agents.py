"""What the control plane does with what cluster agents report, and what it tells them.

An agent sends its inventory and, every few seconds, a heartbeat listing the workers it runs.
The answer is the desired state for that cluster: the attempts that should run there (with
everything needed to start them) and the attempts to stop, with their grace period. The agent
makes its substrate match. Every call is scoped to one cluster: an agent can neither see nor
change another cluster's attempts.
"""

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.locmem import LocMemCache
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from clusters import log_ends
from clusters.backends import base
from clusters.models import Allocation, Cluster, Node
from jobs import actions, bulk, events
from jobs.clock import database_now
from jobs.models import Attempt, Job, LogChunk
from jobs.states import State
from quotas import secret_masking, tenant_secrets, tenant_volumes

Outcome = Attempt.Outcome
log = logging.getLogger(__name__)


INVENTORY_FIELDS = ["cpu_milli", "memory_mb", "gpu_type", "gpu_count", "gpu_shareable",
                    "topology", "features", "healthy", "not_ready_reason", "last_seen"]  # fmt: skip
# Why a node its agent no longer lists is not ready.
UNLISTED = "its agent no longer lists it"


@transaction.atomic
def record_inventory(
    cluster: Cluster,
    nodes: list[base.NodeInventory],
    spec_fields: list[str] | None = None,
    older_release: bool = False,
) -> None:
    """Create or update the reported nodes; nodes no longer reported become unhealthy. The
    agent keeps ``spec_fields`` of the run spec, as ``mark_alive`` takes them.

    The cluster's node rows are locked first, in id order, as a placement commit locks them:
    written in the order the agent reported them, the two could deadlock."""
    list(cluster.nodes.order_by("id").select_for_update().values_list("id", flat=True))
    reported = {inv.name: inv for inv in nodes}  # a name reported twice: the last one counts
    Node.objects.bulk_create(
        [Node(cluster=cluster, name=inv.name, cpu_milli=inv.cpu_milli, memory_mb=inv.memory_mb,
              gpu_type=inv.gpu_type, gpu_count=inv.gpu_count, gpu_shareable=inv.gpu_shareable,
              topology=inv.topology, features=sorted(inv.features), healthy=inv.ready,
              not_ready_reason="" if inv.ready else inv.not_ready, last_seen=Now())
         for inv in reported.values()],
        update_conflicts=True, unique_fields=["cluster", "name"], update_fields=INVENTORY_FIELDS,
    )  # fmt: skip
    cluster.nodes.exclude(name__in=reported).update(healthy=False, not_ready_reason=UNLISTED)
    mark_alive(cluster, spec_fields, older_release)


def mark_alive(
    cluster: Cluster, spec_fields: list[str] | None = None, older_release: bool = False
) -> None:
    """The agent answered, keeping these fields of the run spec (None: it did not say; what it
    said before stands). With ``older_release``, its report (an inventory) said none: the
    agent is taken for a release before them and judged as one (null) until it says otherwise,
    whatever the agent it replaced said. Only the cluster's row is written: nodes get
    `last_seen` from the inventory, so a heartbeat never waits on (or deadlocks with) a
    commit's node locks.

    The time is the database's: the sweep that judges it runs elsewhere (the scheduler's host),
    and two hosts' clocks may differ by more than the agent timeout."""
    said = spec_fields is not None or older_release
    fields = {"agent_spec_fields": spec_fields} if said else {}
    Cluster.objects.filter(pk=cluster.pk).update(
        last_heartbeat=Now(), health=Cluster.Health.HEALTHY, **fields
    )
    if said:
        cluster.agent_spec_fields = spec_fields


def heartbeat(
    cluster: Cluster,
    workers: list[base.WorkerStatus],
    resume_logs: Sequence[tuple[int, int]] = (),
    sent_at: float | None = None,
    usage_epoch: str = "",
    spec_fields: list[str] | None = None,
) -> dict:
    """Apply the agent's report, then answer with the cluster's desired state, and with where
    the logs it asks about (`resume_logs`, (attempt, rank)) end (`log_resumes`).

    What it writes (starts, ends, retry backoffs, checkpoints) is timed on the database's clock,
    as the scheduler and the janitor that read it are; the GPUs' idle times its workers report
    on the agent's clock, and the times they started, are moved onto it by how far the agent's
    is off (`sent_at`, the agent's time as it sent the report: `clock_skew`)."""
    mark_alive(cluster, spec_fields)
    now = database_now()
    by_attempt: dict[int, list[base.WorkerStatus]] = defaultdict(list)
    for worker in workers:
        by_attempt[worker.attempt_id].append(worker)
    # The report is the backend's whole view: an attempt that ran, or that was asked to stop,
    # and that it leaves out is gone too.
    mine = list(
        live_attempts(cluster)
        .filter(
            Q(pk__in=by_attempt)
            | Q(worker_ran_at__isnull=False)
            | Q(stop_requested_at__isnull=False)
        )
        .select_related("job")
    )
    skew = clock_skew(now, sent_at)
    record_checkpoints(mine, by_attempt, now)
    record_usage(mine, by_attempt, skew, usage_epoch)
    with events.coalesced():  # a beat may end many attempts: one live message per tenant
        for attempt in mine:
            apply_report(attempt, by_attempt.get(attempt.pk, []), now, skew)
        for attempt_id in succeeded_while_lost(cluster, by_attempt):
            started = reported_start(by_attempt[attempt_id], skew)
            actions.late_success(attempt_id, now, started)
    state = desired_state(cluster, known=by_attempt.keys())
    if resume_logs:
        state["resume_logs"] = log_resumes(cluster, resume_logs)
    return state


# Workers whose log position one heartbeat answers: an agent restarted beside thousands of
# running workers is answered over a few beats, each of them quick.
RESUMES_PER_BEAT = 500


def log_resumes(cluster: Cluster, keys: Sequence[tuple[int, int]]) -> list[dict]:
    """Where the stored log of each (attempt, rank) ends, for an agent that follows a log it
    did not start reading (restarted, it cannot tell whether the kubelet has rotated the log
    since): the last line's seq, its stamp (seconds since the epoch), how many lines in a row
    up to it have that stamp, and line 0's stamp and head (`log_ends`); seq None where no line
    is stored, or the attempt is not this cluster's. At most RESUMES_PER_BEAT workers: those
    left out are asked for again. At most three queries, however many workers."""
    keys = sorted(set(keys))[:RESUMES_PER_BEAT]
    mine = set(
        Attempt.objects.filter(cluster=cluster, pk__in={a for a, _ in keys}).values_list(
            "pk", flat=True
        )
    )
    ends = log_ends.log_ends([key for key in keys if key[0] in mine])
    return [{"attempt_id": a, "rank": r} | ends.get((a, r), log_ends.NOTHING) for a, r in keys]


def succeeded_while_lost(cluster: Cluster, by_attempt: dict[int, list]) -> list[int]:
    """This cluster's attempts declared lost whose every worker the report shows exited 0 (on
    its own: a worker the agent stopped is reported stopped), their success not yet recorded.

    Only a beat that reports such exits costs a query: a running attempt is reported every
    second. A late failure is not looked at: the job is being retried already."""
    done = [
        pk
        for pk, workers in by_attempt.items()
        if all(w.phase == base.EXITED and w.exit_code == 0 for w in workers)
    ]
    if not done:
        return []
    lost = Attempt.objects.filter(
        cluster=cluster, pk__in=done, outcome=Outcome.LOST, exit_code__isnull=True
    ).values_list("pk", "workers")
    return [pk for pk, world_size in lost if every_rank(by_attempt[pk], world_size)]


def every_rank(workers, world_size: int) -> bool:
    """Whether the workers are the gang's ranks 0..world_size-1, each once: counting them
    instead would let a rank reported twice, or one past the gang, stand for a missing one."""
    return sorted(w.rank for w in workers) == list(range(world_size))


def misreported_ranks(
    cluster: Cluster, ranks: list[tuple[int, int]], each_once: bool = True
) -> dict[int, str]:
    """The report's entries, by position, that name a rank their attempt cannot have, with
    why: one outside 0..workers-1 of this cluster's attempt (another cluster's attempt is
    ignored by the heartbeat and the log store anyway), or, `each_once`, one named before in
    the report (a heartbeat's worker; a log batch names a rank once a line). Empty for a sound
    report.

    Backends key their workers by (attempt, rank) and take ranks from the attempt's spec, so
    such an entry means a broken report: the heartbeat or the log batch is refused whole,
    before anything of it is applied."""
    world_sizes = dict(
        Attempt.objects.filter(cluster=cluster, pk__in={a for a, _ in ranks}).values_list(
            "pk", "workers"
        )
    )
    bad: dict[int, str] = {}
    seen = set()
    for index, (attempt_id, rank) in enumerate(ranks):
        world_size = world_sizes.get(attempt_id)
        if each_once and (attempt_id, rank) in seen:
            bad[index] = f"Rank {rank} of attempt {attempt_id} is reported twice."
        elif world_size is not None and rank >= world_size:
            bad[index] = f"Attempt {attempt_id} has ranks 0 to {world_size - 1}, not {rank}."
        seen.add((attempt_id, rank))
    return bad


STILL_RUNNING = (base.PENDING, base.RUNNING)
# A rank running, or exited, has run: the attempt has started once every rank has, even if a
# quick one finished before a slow one came up. Only exits with code 0 get that far: any other
# end has ended the attempt (attempt_outcome) before its start is looked at.
RAN = (base.RUNNING, base.EXITED)


def live_attempts(cluster: Cluster):
    return Attempt.objects.filter(cluster=cluster, outcome="")


def apply_report(
    attempt: Attempt, workers: list[base.WorkerStatus], now=None, skew: float = 0.0
) -> None:
    """Move the attempt's job on from what its workers do now.

    Once one of its workers has run, a worker the backend no longer reports has vanished (its
    pod was deleted, its process and state went with the machine): it is lost, or stopped if a
    stop was asked for, and never started again inside the same attempt (a rank started twice
    would run twice and number its log lines from 0 again). An attempt asked to stop that the
    backend does not report at all was never started (the agent is not told to start it once
    a stop is asked): it ends now, so its GPUs come back at once.

    The attempt starts when its last rank started, as its workers say (`gang_start`), else
    when the report shows them all running; one that ends before a report shows it running
    has started all the same when they say so (a job of a second, between two beats), and
    its run counts as used, not as waiting to start.
    """
    now = now or timezone.now()
    world_size = attempt.workers  # an elastic gang's may be fewer than its job's
    if attempt.worker_ran_at is not None or attempt.stop_requested_at is not None:
        workers = workers + missing_workers(attempt, workers, world_size)
    elif any(w.phase != base.PENDING for w in workers):
        attempt.worker_ran_at = now  # once
        Attempt.objects.filter(pk=attempt.pk).update(worker_ran_at=attempt.worker_ran_at)
    ended = attempt_outcome(workers, world_size, attempt.stop_reason)
    if ended is not None:
        outcome, exit_code, reason = ended
        if not any(w.phase in STILL_RUNNING for w in workers):
            reason = reason or attempt.reason or "stopped"
            if attempt.started_at is None and (started := gang_start(attempt, workers, now, skew)):
                actions.mark_running(attempt.pk, started)
            actions.end_attempt(attempt.pk, outcome, exit_code=exit_code, reason=reason, now=now)
        elif attempt.stop_requested_at is None:
            # The gang is over, but ranks still run: stop them, and keep its GPUs until they
            # have gone (they would otherwise go to another job while these still use them).
            actions.stop_attempts(Attempt.objects.filter(pk=attempt.pk), outcome, reason, now)
    elif (
        (attempt.started_at is None or attempt.job.state == State.SCHEDULED)
        and every_rank(workers, world_size)
        and all(w.phase in RAN for w in workers)
    ):
        # Once: a running attempt is reported every second, and this writes.
        actions.mark_running(attempt.pk, gang_start(attempt, workers, now, skew) or now)


def gang_start(attempt: Attempt, workers, now, skew: float = 0.0) -> datetime | None:
    """When the attempt's whole gang was running: the latest start its ranks report, moved
    onto the database's clock (`skew`), within its placement and `now`; None unless each of
    its ranks reports one."""
    if not every_rank(workers, attempt.workers) or (at := reported_start(workers, skew)) is None:
        return None
    return min(max(at, attempt.scheduled_at), now)


def reported_start(workers, skew: float = 0.0) -> datetime | None:
    """The latest start the workers report, on the database's clock; None unless each of them
    reports one."""
    stamps = [w.started_at for w in workers]
    if not stamps or None in stamps:
        return None
    return on_our_clock(max(stamps), skew)


def missing_workers(attempt: Attempt, workers, world_size: int) -> list[base.WorkerStatus]:
    seen = {w.rank for w in workers}
    phase = base.STOPPED if attempt.stop_requested_at is not None else base.LOST
    return [
        base.WorkerStatus(attempt.pk, rank, phase, reason="the agent no longer finds it")
        for rank in range(world_size)
        if rank not in seen
    ]


def record_checkpoints(attempts: list[Attempt], by_attempt: dict[int, list], now) -> None:
    """Keep, per attempt, the latest checkpoint time any of its workers reports (never one in
    the future). One write for all that moved, before any attempt ends: the wasted GPU time of
    an attempt that ends in this beat counts from its newest checkpoint.

    A time before the attempt's start (or its placement, before it starts) is not its
    checkpoint: every attempt of a job shares the checkpoint folder, so a retry reports the
    marker its predecessor touched until it saves one of its own."""
    moved = []
    for attempt in attempts:
        seen = [w.checkpoint_at for w in by_attempt.get(attempt.pk, [])
                if w.checkpoint_at is not None]  # fmt: skip
        if not seen:
            continue
        at = min(datetime.fromtimestamp(max(seen), tz=UTC), now)
        if at < (attempt.started_at or attempt.scheduled_at):
            continue
        if attempt.last_checkpoint_at is None or at > attempt.last_checkpoint_at:
            attempt.last_checkpoint_at = at
            moved.append((attempt.pk, at))
    bulk.update(Attempt, ["last_checkpoint_at"], moved)


# Agents' clocks off by less than this are taken as right (NTP keeps hosts far closer); those
# off by more are corrected by a multiple of it, so that a report's transit time does not move
# an idle time, and write it again, at every beat.
SKEW_STEP_S = 10


def clock_skew(now: datetime, sent_at: float | None) -> float:
    """Seconds to add to a time on the agent's clock to have it on the database's: how far the
    agent's clock was behind as it sent its report, in steps of SKEW_STEP_S (0 when unknown)."""
    if sent_at is None:
        return 0.0
    return SKEW_STEP_S * round((now.timestamp() - sent_at) / SKEW_STEP_S)


# The last second a datetime can hold (9999-12-31), in seconds since the epoch.
MAX_TIMESTAMP = 253_402_300_799


def on_our_clock(stamp: float, skew: float) -> datetime | None:
    """A time on the agent's clock (seconds since the epoch) moved onto the database's
    (`clock_skew`); None where that is no time a datetime can hold, as the API leaves out a
    stamp it cannot read: the report's clock ("sent_at") and the stamp, each in range, may be
    ages apart (a host's clock set to the year 9999)."""
    moved = stamp + skew
    return datetime.fromtimestamp(moved, tz=UTC) if 0 <= moved <= MAX_TIMESTAMP else None


def record_usage(
    attempts: list[Attempt], by_attempt: dict[int, list], skew: float = 0.0, epoch: str = ""
) -> None:
    """Keep what each attempt's workers report they have used: their CPU and GPU seconds
    together and the largest memory peak of one of them (a request is per worker). One write
    for all that moved (a backend samples its running workers every half minute: most beats
    write nothing). What was counted stays counted: a worker that vanishes takes its share of
    the sum out of the report, not out of the attempt. GPU-seconds are counted by the agent
    (`epoch`, its backend's run of counts): a new run whose count is below what the attempt
    has (a restarted agent counting from 0) counts on top of it."""
    moved = []
    for attempt in attempts:
        workers = by_attempt.get(attempt.pk, [])
        cpu = [w.cpu_seconds for w in workers if w.cpu_seconds is not None]
        peak = [w.memory_peak_mb for w in workers if w.memory_peak_mb is not None]
        gpu = [w for w in workers if w.gpu_busy_seconds is not None]
        had = tuple(getattr(attempt, name) for name in COUNTED)
        run, before = had[4:]
        counted = sum(w.gpu_busy_seconds for w in gpu)
        if gpu and epoch and epoch != run:
            so_far = had[2] or 0.0
            run, before = epoch, so_far if counted < so_far else 0.0
        seen = (
            max(sum(cpu), had[0] or 0.0) if cpu else had[0],
            max(*peak, had[1] or 0) if peak else had[1],
            max(before + counted, had[2] or 0.0) if gpu else had[2],
            idle_since(workers, gpu, had[3], skew),
            run,
            before,
        )
        if seen != had:
            for name, value in zip(COUNTED, seen, strict=True):
                setattr(attempt, name, value)
            moved.append((attempt.pk, *seen))
    bulk.update(Attempt, COUNTED, moved)


# Attempt's, as agents report them, and the run of counts its GPU-seconds are in.
USAGE = ["cpu_seconds", "memory_peak_mb", "gpu_busy_seconds", "gpu_idle_since"]
COUNTED = [*USAGE, "gpu_epoch", "gpu_counted_before"]


def idle_since(workers, measured, had: datetime | None, skew: float = 0.0) -> datetime | None:
    """The attempt's GPUs idle since, on the database's clock (their agent's is ``skew``
    seconds behind): as before when none of its workers is in the report; else the latest of
    its workers' idle times when each of them carries its GPU figures and reads idle (a gang's
    idle rank beside a busy one is not idle); else None, unknown or busy: a worker whose GPUs
    are not read now (its exporter gone, its agent restarted) may be busy, and an idle time
    kept from before would stop it under a tenant's idle limit."""
    if not workers:
        return had
    stamps = [w.gpu_idle_since for w in measured]
    if len(measured) < len(workers) or None in stamps:
        return None
    return on_our_clock(max(stamps), skew)


def attempt_outcome(workers, world_size: int, stop_reason: str):
    """(outcome, exit code, reason) once the attempt is over, else None.

    A gang ends as a whole: one worker lost or failed ends the attempt as an infrastructure
    failure; one worker's non-zero exit (out-of-memory kills included: the job passed its own
    request) ends it as a user error; it succeeds once each of its ranks has exited 0.
    """
    for phase, outcome in ((base.LOST, Outcome.LOST), (base.FAILED, Outcome.INFRA_ERROR)):
        for w in workers:
            if w.phase == phase:
                # A backend that gives no reason: the phase says what became of it.
                return outcome, w.exit_code, f"worker {w.rank}: {w.reason or w.phase}"
    for w in workers:
        if w.phase == base.TIMED_OUT:
            return Outcome.TIMEOUT, w.exit_code, f"worker {w.rank} {w.reason or 'timed out'}"
        if w.phase == base.EXITED and w.exit_code != 0:
            detail = f" ({w.reason})" if w.reason else ""
            return (
                Outcome.USER_ERROR,
                w.exit_code,
                f"worker {w.rank} exited with code {w.exit_code}{detail}",
            )
    if any(w.phase == base.STOPPED for w in workers):
        return stop_reason or Outcome.LOST, None, ""  # the stop request's own reason stands
    if every_rank([w for w in workers if w.phase == base.EXITED], world_size):
        return Outcome.SUCCEEDED, 0, "exit code 0"
    return None


def desired_state(cluster: Cluster, known=()) -> dict:
    """The attempts that should run on the cluster, and those to stop.

    An attempt the agent reported (``known``) is already started: it is named by its id and
    its job's runtime limit alone (lowered while it runs, the agent lowers its workers'). The
    others come with everything needed to start them, so a beat costs what is new, not what
    runs."""
    live = (
        live_attempts(cluster)
        .select_related("job")
        .only("id", "stop_requested_at", "stop_reason", "job__max_runtime_s")
    )
    known = set(known)
    limits = {a.pk: a.job.max_runtime_s for a in live if a.stop_requested_at is None}
    run = list(limits)
    stop = [
        {"attempt_id": a.pk, "grace_s": settings.MLSCHED_STOP_GRACE_S, "reason": a.stop_reason}
        for a in live
        if a.stop_requested_at is not None
    ]
    workers = worker_specs([pk for pk in run if pk not in known])
    # A live attempt always holds its allocations; one without any is not startable.
    new = list(Attempt.objects.filter(pk__in=workers).select_related("job__tenant"))
    secrets = tenant_secrets.opened(a.job for a in new)
    pulls = tenant_secrets.pull_credentials(a.job for a in new)
    specs = []
    none = tenant_secrets.Opened({}, {})
    for a in new:
        opened, pull = secrets.get(a.job_id, none), pulls.get(a.job_id, {})
        volumes, gone = tenant_volumes.for_spec(a.job.tenant_id, a.job.volumes)
        if refused := next((x for x in (opened, pull, gone) if isinstance(x, str) and x), ""):
            # It cannot start: it fails, saying why, whatever it asked of retries (another
            # attempt would fail the same way until a tenant owner mends it).
            actions.end_attempt(a.pk, Attempt.Outcome.USER_ERROR, reason=refused, retriable=False)
            continue
        assert isinstance(opened, tenant_secrets.Opened) and isinstance(pull, dict)
        needs = (bool(a.job.secrets), bool(pull), bool(opened.files), bool(volumes))
        if lacking := agent_lacks(cluster, *needs):
            # The scheduler places such work elsewhere; this one was placed as the agent
            # changed release: it runs again, on an agent that keeps what it needs.
            actions.end_attempt(a.pk, Attempt.Outcome.INFRA_ERROR, reason=lacking)
            continue
        specs.append(asdict(attempt_spec(a, workers[a.pk], opened, pull, volumes)))
    started = [{"attempt_id": pk, "max_runtime_s": limits[pk]} for pk in run if pk in known]
    return {"run": started + specs, "stop": stop}


def agent_lacks(
    cluster: Cluster,
    secrets: bool,
    pull_credential: bool,
    secret_files: bool = False,
    volumes: bool = False,
) -> str:
    """Why the cluster's agent cannot be given an attempt needing these (its release would
    leave out a field of the run spec it needs); "" if it can."""
    kept = cluster.agent_spec_fields
    lacking = base.spec_fields_lacking(
        kept, secrets, pull_credential, cluster.backend, secret_files, volumes
    )
    if not lacking:
        return ""
    return (
        f"the agent of cluster {cluster.name} is of a release that would leave out the run "
        f"spec's {' and '.join(lacking)}: its workers would start without them"
    )


def worker_specs(attempt_ids: list[int]) -> dict[int, list[base.WorkerSpec]]:
    rows = (
        Allocation.objects.active()
        .filter(attempt_id__in=attempt_ids)
        .order_by("attempt_id", "worker", "slot")
        .values("attempt_id", "worker", "node__name", "gpu_index", "gpu_milli", "cpu_milli",
                "memory_mb")
    )  # fmt: skip
    grouped: dict[int, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        grouped[row["attempt_id"]][row["worker"]].append(row)
    return {
        attempt_id: [
            base.WorkerSpec(
                rank=rank,
                node=slots[0]["node__name"],
                gpu_indices=tuple(s["gpu_index"] for s in slots if s["gpu_index"] is not None),
                gpu_milli=slots[0]["gpu_milli"],
                cpu_milli=slots[0]["cpu_milli"],
                memory_mb=slots[0]["memory_mb"],
            )  # fmt: skip
            for rank, slots in sorted(workers.items())
        ]
        for attempt_id, workers in grouped.items()
    }


def attempt_spec(
    attempt: Attempt,
    workers: list[base.WorkerSpec],
    secrets: tenant_secrets.Opened | None = None,
    pull_credential: dict[str, str] | None = None,
    volumes: tuple[dict, ...] = (),
) -> base.AttemptSpec:
    job: Job = attempt.job
    return base.AttemptSpec(
        attempt_id=attempt.pk, job_id=job.pk, number=attempt.number, tenant=job.tenant.slug,
        tenant_id=job.tenant_id,
        name=job.name, image=job.image, command=tuple(job.command),
        env={str(k): str(v) for k, v in job.env.items()}, workers=tuple(workers),
        checkpoint_dir=job.checkpoint_dir, max_runtime_s=job.max_runtime_s,
        stop_grace_s=settings.MLSCHED_STOP_GRACE_S, shard_index=job.shard_index or 0,
        shards=job.shards, min_workers=job.min_workers or job.workers, max_workers=job.workers,
        secrets=secrets.variables if secrets else {}, pull_credential=pull_credential or {},
        secret_files=secrets.files if secrets else {}, volumes=volumes,
    )  # fmt: skip


def store_logs(cluster: Cluster, lines: list[base.LogLine], now: float | None = None) -> int:
    """Keep the lines of this cluster's attempts (a line sent twice, in one batch or two, is
    kept and counted once) and push them to the viewers of each job's page. The number of
    lines stored, notes of dropped lines included."""
    rows = Attempt.objects.filter(
        cluster=cluster, pk__in={line.attempt_id for line in lines}
    ).values_list("pk", "job_id", "number", "job__tenant_id", "job__secrets")
    attempts = {pk: (job_id, number) for pk, job_id, number, _, _ in rows}
    tenants = {pk: tenant for pk, _, _, tenant, _ in rows}
    fresh = unstored([line for line in lines if line.attempt_id in attempts])
    mine = within_tenant_rate(capped(fresh), tenants, now)
    named = [pk for pk, _, _, _, secrets in rows if secrets]
    if named:
        mine = masked(mine, secret_masking.masks(named))
    LogChunk.objects.bulk_create(
        [LogChunk(attempt_id=line.attempt_id, worker=line.rank, seq=line.seq,
                  stream=line.stream, text=line.text, logged_at=logged_at(line))
         for line in mine],
        ignore_conflicts=True,
    )  # fmt: skip
    by_job: dict[int, list[events.LogLine]] = defaultdict(list)
    for line in mine:
        job_id, number = attempts[line.attempt_id]
        by_job[job_id].append(events.LogLine(attempt=number, worker=line.rank, seq=line.seq,
                                             stream=line.stream, text=line.text))  # fmt: skip
    events.publish_logs(by_job)
    return len(mine)


def masked(lines: list[base.LogLine], hidden: dict[int, list[str]]) -> list[base.LogLine]:
    """The lines with the secrets their jobs name written *** (``secret_masking.masks``)."""
    return [
        replace(line, text=secret_masking.mask(line.text, hidden[line.attempt_id]))
        if line.attempt_id in hidden
        else line
        for line in lines
    ]


def logged_at(line: base.LogLine) -> datetime | None:
    """The line's stamp as the database keeps it (to the microsecond, as the agent reads it)."""
    return None if line.at is None else datetime.fromtimestamp(line.at, tz=UTC)


def unstored(lines: list[base.LogLine]) -> list[base.LogLine]:
    """The lines not stored yet, each once. An agent that restarts sends its workers' logs
    again, and a batch may name a line twice: a line stored once must neither count toward the
    tenant's rate, nor in the answer, nor reach the viewers more than once. One query, over
    each worker's seq range in the batch."""
    ranges: dict[tuple[int, int], list[int]] = {}
    for line in lines:
        low_high = ranges.setdefault((line.attempt_id, line.rank), [line.seq, line.seq])
        low_high[0], low_high[1] = min(low_high[0], line.seq), max(low_high[1], line.seq)
    if not ranges:
        return []
    where = Q()
    for (attempt_id, rank), (low, high) in ranges.items():
        where |= Q(attempt_id=attempt_id, worker=rank, seq__gte=low, seq__lte=high)
    seen = set(LogChunk.objects.filter(where).values_list("attempt_id", "worker", "seq"))
    fresh = []
    for line in lines:  # a line the batch names twice is one line: its first copy is kept
        key = (line.attempt_id, line.rank, line.seq)
        if key not in seen:
            seen.add(key)
            fresh.append(line)
    return fresh


def capped(lines: list[base.LogLine]) -> list[base.LogLine]:
    """Lines under the per-worker cap (``MLSCHED_LOG_MAX_LINES``), and in place of the first line
    past it a note that the rest is dropped. Seqs count each worker's lines from 0, so the cap
    needs no query and holds however the lines are batched or resent."""
    cap = settings.MLSCHED_LOG_MAX_LINES
    out = []
    for line in lines:
        if line.seq < cap:
            out.append(line)
        elif line.seq == cap:
            note = f"[mlsched] log truncated: this worker's output passed {cap} lines"
            out.append(replace(line, stream="stderr", text=note))
    return out


# The tenant log rate's counters while the shared cache is down: this process's alone.
_process_counts = LocMemCache("mlsched-tenant-log-rate", {})


def within_tenant_rate(
    lines: list[base.LogLine], tenant_of: dict[int, int], now: float | None = None
) -> list[base.LogLine]:
    """Lines under each tenant's ``MLSCHED_TENANT_LOG_RATE`` (lines per minute, all its workers
    together), so one tenant's output cannot flood the log store its neighbours share. In place
    of a worker's first line dropped in a minute, a note says why. Counters live in the shared
    "throttle" cache (Redis when configured), so every web process counts against one limit;
    while it is out of reach each process counts on its own, and the logs are still stored."""
    with events.best_effort("the tenant log rate"):
        return rate_limited(lines, tenant_of, now, caches["throttle"])
    return rate_limited(lines, tenant_of, now, _process_counts)


def rate_limited(
    lines: list[base.LogLine], tenant_of: dict[int, int], now: float | None, cache: BaseCache
) -> list[base.LogLine]:
    rate = settings.MLSCHED_TENANT_LOG_RATE
    window = int((now or time.time()) // 60)
    by_tenant: dict[int, list[base.LogLine]] = defaultdict(list)
    for line in lines:
        by_tenant[tenant_of[line.attempt_id]].append(line)
    out = []
    for tenant, mine in by_tenant.items():
        key = f"log-lines:{tenant}:{window}"
        cache.add(key, 0, timeout=120)
        room = max(0, rate - (cache.incr(key, len(mine)) - len(mine)))
        out.extend(mine[:room])
        # A worker's first dropped line of the batch may carry its note (one cache call each).
        first = {(line.attempt_id, line.rank): line for line in reversed(mine[room:])}
        for line in sorted(first.values(), key=lambda line: (line.attempt_id, line.rank)):
            note = f"log-note:{line.attempt_id}:{line.rank}:{window}"
            if cache.add(note, 1, timeout=120):
                text = f"[mlsched] log lines dropped: this tenant passed {rate} lines a minute"
                out.append(replace(line, stream="stderr", text=text))
    return out


def sweep_silent_clusters(now=None) -> dict[str, int]:
    """Clusters whose agent went quiet: unhealthy at once, their attempts ended after a grace,
    as lost (retried), or as their stop asked where one was (a preemption, a cancel).

    Only while some other cluster's agent still reaches us: when every agent has gone quiet,
    the likelier cause is on this side (the web tier, its proxy or the database down), the
    workers are probably running, and declaring them lost would requeue every job on the
    platform and run them twice once the agents are back.

    `now` is the database's clock (heartbeats are written with it), not this host's."""
    now = now or database_now()
    silent_since = now - timedelta(seconds=settings.MLSCHED_AGENT_TIMEOUT_S)
    unhealthy = Cluster.objects.filter(
        health=Cluster.Health.HEALTHY, last_heartbeat__lt=silent_since
    ).update(health=Cluster.Health.UNHEALTHY)
    lost_since = now - timedelta(seconds=settings.MLSCHED_AGENT_LOST_GRACE_S)
    lost = Attempt.objects.filter(
        outcome="", cluster__health=Cluster.Health.UNHEALTHY, cluster__last_heartbeat__lt=lost_since
    )
    if not Cluster.objects.filter(last_heartbeat__gte=silent_since).exists():
        if lost.exists():
            quiet = settings.MLSCHED_AGENT_TIMEOUT_S
            log.warning("no cluster agent has reported for %s s: nothing is declared lost "
                        "while none reaches the control plane", quiet)  # fmt: skip
        return {"unhealthy": unhealthy, "lost": 0}
    count = 0
    with events.coalesced():  # a whole cluster's work at once: one live message per tenant
        for attempt_id, stop_reason in lost.values_list("pk", "stop_reason"):
            # An attempt asked to stop ends as the stop asked, with the stop's message (a
            # preempted one is requeued at once, without using a retry); any other is lost.
            reason = "" if stop_reason else Attempt.AGENT_SILENT
            actions.end_attempt(attempt_id, stop_reason or Outcome.LOST, reason=reason, now=now)
            count += 1
    return {"unhealthy": unhealthy, "lost": count}
