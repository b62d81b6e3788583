"""Jobs, their dependencies and their attempts (the records kept beside them: jobs/records.py)."""

import json
import re
from datetime import timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import connection, models
from django.db.models.functions import Now
from django.utils import timezone

from clusters.backends import base
from jobs.placement.words import where_on
from jobs.states import ACTIVE, TERMINAL, State


class Family(models.TextChoices):
    TRAINING = "training"
    BATCH_INFERENCE = "batch_inference", "Batch inference"  # as the submit form says it
    EVALUATION = "evaluation"


class LabelValue(models.Func):
    """A label's value, as text, by its key, whatever the key looks like: Django's key
    transforms read a key of digits ("2024", "-5") as an array index, which finds nothing in
    the labels' object (and on PostgreSQL a number past its integers fails the query)."""

    output_field = models.TextField()

    def __init__(self, key: str, labels: str):
        super().__init__(models.F(labels))
        self.key = key

    def as_postgresql(self, compiler, connection, **extra):
        labels, params = compiler.compile(self.get_source_expressions()[0])
        return f"({labels} ->> %s)", (*params, self.key)

    def as_sqlite(self, compiler, connection, **extra):
        labels, params = compiler.compile(self.get_source_expressions()[0])
        return f"JSON_EXTRACT({labels}, %s)", (*params, "$." + json.dumps(self.key))


class JobQuerySet(models.QuerySet):
    def for_tenants(self, tenants):
        return self.filter(tenant__in=tenants)

    def labelled(self, asked: list[tuple[str, str | None]]):
        """The jobs carrying every label asked: (key, value), or (key, None) for any value.
        PostgreSQL answers from the labels' GIN index (jsonb containment, migration 0030);
        SQLite, which has no containment, compares each job's value."""
        jobs = self
        for number, (key, value) in enumerate(asked):
            if value is None:
                jobs = jobs.filter(labels__has_key=key)
            elif connection.features.supports_json_field_contains:
                jobs = jobs.filter(labels__contains={key: value})
            else:
                alias = f"label_{number}"
                jobs = jobs.alias(**{alias: LabelValue(key, "labels")})
                jobs = jobs.filter(**{alias: value})
        return jobs

    def live(self):
        return self.exclude(state__in=TERMINAL)

    def with_end_reason(self):
        """Each job with why it ended, `end_reason` (Job.why_ended), read with it: one
        subquery per ended row read, by the index jobevent_job_time."""
        return self.annotate(
            end_reason=models.Case(
                models.When(
                    state__in=TERMINAL,
                    then=models.Subquery(
                        end_events(models.OuterRef("pk"), models.OuterRef("state"))
                    ),
                ),
                default=models.Value(""),
                output_field=models.CharField(),
            )
        )

    def with_started_workers(self):
        """Each elastic gang that is placed with the workers its live attempt started with,
        `started_workers` (None for any other job): one subquery per such row, by the index
        attempt_one_live_per_job."""
        live = Attempt.objects.filter(job=models.OuterRef("pk"), outcome="").values("workers")
        return self.annotate(
            started_workers=models.Case(
                models.When(
                    min_workers__isnull=False,
                    state__in=(State.SCHEDULED, State.RUNNING),
                    then=models.Subquery(live[:1]),
                ),
                default=None,
                output_field=models.PositiveSmallIntegerField(),
            )
        )


def end_events(job, state):
    """The reasons of a job's moves into its ended `state`, the last first (a lost attempt's
    late success not taken is recorded from the state to itself: not one)."""
    moves = JobEvent.objects.filter(job=job, to_state=state).exclude(
        from_state=models.F("to_state")
    )
    return moves.order_by("-time", "-id").values("reason")[:1]


class Job(models.Model):
    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    name = models.CharField(max_length=200)
    family = models.CharField(max_length=20, choices=Family.choices)
    image = models.CharField(max_length=500)
    command = models.JSONField(help_text="The command as a list of arguments.")
    env = models.JSONField(default=dict, blank=True)

    # Per-worker request. A worker wants `gpus` whole GPUs, or a share of one GPU in
    # `gpu_milli` (1..999, evaluation and batch inference on shareable GPU types only).
    cpu_milli = models.PositiveIntegerField(
        "CPU per worker (millicores)", validators=[MinValueValidator(1)]
    )
    memory_mb = models.PositiveIntegerField(
        "memory per worker (MiB)", validators=[MinValueValidator(1)]
    )
    gpus = models.PositiveSmallIntegerField("GPUs per worker", default=0)
    gpu_milli = models.PositiveSmallIntegerField(
        "GPU share (thousandths)", default=0, validators=[MaxValueValidator(999)]
    )
    gpu_types = models.JSONField(
        "GPU types", default=list, blank=True, help_text="Acceptable GPU types; empty means any."
    )
    first_type_wait_s = models.PositiveIntegerField(
        "waits for its first GPU type (s)",
        null=True,
        blank=True,
        help_text="Takes only the first of its GPU types for this many seconds from when it may "
        "run, then any of them: worth a wait for the fastest.",
    )
    cluster_selector = models.JSONField(
        default=dict, blank=True, help_text="Cluster labels the job requires."
    )
    exclude_nodes = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        blank=True,
        help_text="Names of nodes it never runs on, in any cluster (Slurm's --exclude).",
    )
    only_nodes = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        blank=True,
        help_text="Names of the nodes it runs on alone, in any cluster (Kubernetes' node "
        "affinity on the hostname); empty: any node.",
    )
    features = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        blank=True,
        help_text="What every node it runs on must offer (Slurm's --constraint=ib&nvme).",
    )
    exclusive = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Each worker takes a node to itself, every GPU of it, and no other job runs "
        "there while it does (Slurm's --exclusive).",
    )
    labels = models.JSONField(
        default=dict,
        # In the database too: rows written without it (by an older release while this one
        # rolls out, or by SQL) get none.
        db_default=models.Value({}, models.JSONField()),
        blank=True,
        help_text="The submitter's own labels (project=llm, sweep=lr-3), to find and count the "
        "job by; the scheduler does not read them.",
    )
    secrets = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        blank=True,
        help_text="Names of its tenant's secrets (quotas.TenantSecret) its workers get as "
        "environment variables; the values are not stored with the job.",
    )
    # Its tenant's data volumes (quotas.TenantVolume) its workers mount: each {"name": the
    # volume, "path": where its workers see it, "read_only": true unless it writes}.
    volumes = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        blank=True,
        help_text="Its tenant's data volumes its workers mount, each with the path they see "
        "it at and whether it is read only.",
    )
    workers = models.PositiveSmallIntegerField(
        default=1, help_text="Gang size: all workers start together or none does."
    )
    # An elastic gang (torchrun's --nnodes=MIN:MAX, Kueue's partial admission): it starts with
    # the most workers that fit now, at least this many, when all of them do not; each attempt
    # keeps the size it started with (Attempt.workers).
    min_workers = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Elastic training: the fewest workers it may start with when its whole gang "
        "does not fit (empty: all of them).",
    )
    # A training gang's topology domain (Kueue's required topology, Slurm's --switches): the
    # key of a node topology label whose one value all its nodes share ("": any nodes).
    topology = models.CharField(
        max_length=63,
        blank=True,
        default="",
        help_text="Training: a node topology label (rack, nvlink, zone) whose one value all "
        "of its gang's nodes share. Empty: any nodes of one cluster and GPU type.",
    )
    # A batch has a row per shard, each its `shard_index` (0..shards-1) among `shards`, which
    # its workers are told (MLSCHED_SHARD_INDEX, MLSCHED_SHARDS). A rerun of some of a batch's
    # shards (jobs.actions.resubmit) has a row for each shard chosen alone, keeping its index
    # and the batch's `shards`: its rows, counted by shard_states(), may be fewer.
    shards = models.PositiveIntegerField(
        default=1, help_text="Independent shards of a batch inference job."
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="shard_jobs"
    )
    shard_index = models.PositiveIntegerField(null=True, blank=True)
    # Slurm's array throttle (--array=0-999%10): every shard row of a batch carries it, so the
    # snapshot reads it off each queued shard (jobs.placement.batch_limit). NULL in the
    # database too for rows written without it (db_default): no limit.
    max_running_shards = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=None,
        db_default=None,
        validators=[MinValueValidator(1)],
        help_text="At most this many of the batch's shards run at once (Slurm's "
        "--array=...%N); the others wait until one ends. Empty: no limit.",
    )
    resubmitted_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="resubmissions",
        help_text="The ended job this one runs again (a batch's shards: the batch it reruns).",
    )
    # Slurm's --dependency (afterok, afterany, afternotok: Dependency.kind). Held by a batch's
    # first shard for the whole batch, and pointing at single jobs or a batch's first shard
    # (which stands for every shard of it).
    depends_on = models.ManyToManyField(
        "self",
        symmetrical=False,
        through="Dependency",
        through_fields=("job", "on"),
        related_name="dependents",
        blank=True,
        help_text="Jobs that must all have succeeded (a batch: every shard), or ended, or ended "
        "without success, as each dependency's kind says, before this one is placed.",
    )
    # Slurm's --dependency=singleton, for the group of jobs of one tenant, submitter and name:
    # see jobs.dependencies. Every shard of a batch carries it: the batch counts as one job.
    singleton = models.BooleanField(
        default=False,
        help_text="Placed only once every earlier job of the same tenant, submitter and name "
        "has ended (a batch: every shard), so that one of them runs at a time.",
    )

    priority_class = models.ForeignKey("quotas.PriorityClass", on_delete=models.PROTECT)
    priority = models.IntegerField(default=0, help_text="Order inside the tenant and tier.")
    preemptible = models.BooleanField(default=True)
    max_runtime_s = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    max_retries = models.PositiveSmallIntegerField(default=3)
    retry_user_errors = models.BooleanField(
        default=False,
        help_text="Retry a non-zero exit of the job's own code too, within max_retries (code "
        "known to fail now and then). Off, such an exit fails the job at once.",
    )
    # Kubernetes' podFailurePolicy onExitCodes, Volcano's exitCode policy: the exits of its
    # own code that are transient (a NCCL timeout's, EX_TEMPFAIL), retried as an
    # infrastructure failure is; the others fail it. A process killed by signal N is 128+N.
    retry_exit_codes = models.JSONField(
        default=list,
        blank=True,
        db_default=[],
        help_text="Exit codes of the job's own code to retry within max_retries (1 to 255; "
        "killed by signal N: 128+N); another exit fails it, unless retry_user_errors.",
    )
    notify_start = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Tell its team's webhook when it starts (a batch: when its first shard "
        "does), as Slurm's --mail-type=BEGIN; its end is told in any case.",
    )
    notify_requeue = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Tell its team's webhook each time it is stopped and queued again (preempted, "
        "drained, requeued, retried after an infrastructure failure), as Slurm's "
        "--mail-type=REQUEUE.",
    )
    notify_time_limit = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Tell its team's webhook when a run of it has used 90 % of its runtime "
        "limit, as Slurm's --mail-type=TIME_LIMIT_90: time to save what it must.",
    )
    notify_email = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Email its submitter what its team's webhook is told of it (its end, and "
        "what the other notify fields ask), as Slurm's --mail-user.",
    )
    retries_used = models.PositiveSmallIntegerField(default=0)
    # Times it was queued again, no retry used, for its node on an interruptible cluster
    # (MLSCHED_INTERRUPTION_REQUEUES bounds them: past them, each uses a retry).
    interruptions = models.PositiveIntegerField(default=0, db_default=0)
    # NULL, not "": jobs submitted without a key must not collide in the unique constraint.
    idempotency_key = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001

    state = models.CharField(max_length=12, choices=State.choices, default=State.QUEUED)
    # Why the job waits, as the scheduler last said it: a code for machines, a sentence for people.
    pending_reason = models.CharField(max_length=40, blank=True)
    pending_message = models.CharField(max_length=300, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    # Slurm's --begin: kept as asked, for the job's page and answer. The scheduler reads
    # not_before, which the submission sets to it and a retry's backoff later moves past it
    # (a job only retries once placed, so after its begin).
    begin = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Deferred start: not placed before this time (Slurm's --begin). Empty: as "
        "soon as it may run.",
    )
    not_before = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Not placed before this time: the job's begin, then its retry's backoff.",
    )
    # Slurm's --deadline: a queued job that could no longer end by it (started now, running its
    # whole runtime limit) is canceled (jobs.janitor) and never placed (the snapshot and the
    # commit's claim exclude late_for_deadline). A running job is bounded by its runtime limit.
    deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Canceled while queued once it could no longer end by this time, were it "
        "started at once and run for its whole runtime limit (Slurm's --deadline). Empty: none.",
    )
    preempting_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The job asked work to stop to make room for itself: until it starts (or "
        "this time passes) that room is its own, ahead of the queue.",
    )

    class Hold(models.TextChoices):
        USER = "user"  # by the team: its members release it
        ADMIN = "admin"  # by a platform admin: only a platform admin releases it

    held = models.CharField(
        max_length=5,
        choices=Hold.choices,
        blank=True,
        default="",
        help_text="A held queued job is not placed until it is released.",
    )
    # Written by the database, on its clock: queue aging and the tier wait compare it with the
    # scheduler's now (jobs.clock), and a web host's clock may be minutes off.
    created = models.DateTimeField(db_default=Now())
    # On the database's clock too: the usage reports and /metrics subtract it from the start.
    eligible_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the job last became free to run before its first start (not held, its "
        "dependencies met, no earlier job of a singleton's group live, past its retry "
        "backoff): its queue wait runs from here. Empty while it is not; kept once it starts.",
    )
    scheduled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        # Granted per job with django-guardian, to share one job outside its tenant.
        permissions = [("cancel_job", "Can cancel the job")]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"], name="job_unique_idempotency_key"
            ),
            models.CheckConstraint(
                condition=models.Q(gpus=0) | models.Q(gpu_milli=0),
                name="job_whole_gpus_or_share",
            ),
            models.CheckConstraint(condition=models.Q(workers__gte=1), name="job_workers_min"),
            models.CheckConstraint(
                condition=models.Q(min_workers__isnull=True)
                | models.Q(min_workers__gte=1, min_workers__lte=models.F("workers")),
                name="job_min_workers_range",
            ),
            models.CheckConstraint(condition=models.Q(shards__gte=1), name="job_shards_min"),
        ]
        indexes = [
            models.Index(fields=["state", "created"], name="job_state_created"),
            models.Index(fields=["tenant", "state"], name="job_tenant_state"),
            # /metrics and the overview: jobs started in the last day (queue wait).
            models.Index(fields=["started_at"], name="job_started_at"),
            # /metrics and the overview: jobs finished in the last day (success rate).
            models.Index(fields=["finished_at"], name="job_finished_at"),
            # The portal's job list, each batch folded into its first shard (access.folded):
            # newest first past a batch's other shards without reading them.
            models.Index(
                fields=["id"], condition=models.Q(parent__isnull=True), name="job_unsharded_id"
            ),
            # `?batch=`: a batch's last shard, one probe (Job.rows_of_batch).
            models.Index(
                fields=["parent", "id"],
                condition=models.Q(parent__isnull=False),
                name="job_shard_parent_id",
            ),
            # Whether a batch its dependents wait for has a shard not (yet) succeeded: one
            # probe, however many shards have succeeded (jobs.dependencies.unmet).
            models.Index(
                fields=["parent"],
                condition=models.Q(parent__isnull=False) & ~models.Q(state=State.SUCCEEDED),
                name="job_shard_unsucceeded",
            ),
            # Whether such a batch has a shard that has not ended (afterany, afternotok): one
            # probe, however many shards have ended.
            models.Index(
                fields=["parent"],
                condition=models.Q(parent__isnull=False) & ~models.Q(state__in=sorted(TERMINAL)),
                name="job_shard_live",
            ),
            # The queued jobs with a deadline, which the janitor asks every turn whether they
            # could still end by it (Job.late_for_deadline): those rows alone.
            models.Index(
                fields=["deadline"],
                condition=models.Q(state=State.QUEUED, deadline__isnull=False),
                name="job_queued_deadline",
            ),
            # A singleton job's earlier jobs of its name that have not ended, in id order: one
            # probe, however many have ended (jobs.dependencies.singleton_waits).
            models.Index(
                fields=["tenant", "owner", "name", "id"],
                condition=~models.Q(state__in=sorted(TERMINAL)),
                name="job_live_by_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    def eligible_since(self, now):
        """Since when the job may run, if it may by `now`: None while it may not. During a
        retry's backoff `eligible_at` already holds the backoff's end, which is still to come."""
        at = self.eligible_at
        return at if at is not None and at <= now else None

    def why_ended(self) -> str:
        """Why the job ended, as its last move into its ended state said it ("worker 0 exited
        with code 3", "canceled by alice"); "" while it lives. Read with the job
        (JobQuerySet.with_end_reason), or here."""
        if self.state not in TERMINAL:
            return ""
        if not hasattr(self, "end_reason"):
            last = end_events(self.pk, self.state).first()
            self.end_reason = last["reason"] if last else ""
        return self.end_reason or ""

    @property
    def is_batch(self) -> bool:
        """The first shard of a batch inference submission (shard 0; a rerun of some shards:
        the lowest chosen), which stands for all its shards."""
        return self.parent_id is None and self.shards > 1

    @staticmethod
    def batch_key(pk, parent_id, shards: int) -> str | None:
        """The batch a job is a shard of, as the placement core names it: its first shard's id
        (shard 0, or a rerun's lowest, which stands for the batch: is_batch); None for a job
        of no batch."""
        if parent_id is not None:
            return str(parent_id)
        return str(pk) if shards > 1 else None

    @staticmethod
    def rows_of_batch(batch: int) -> models.Q:
        """The jobs of batch `batch` (its first shard, and the others, which name it as their
        parent), up to its last shard's id. Its rows lie at or below that id, so a newest-first
        page of them starts there instead of walking back through every job submitted since
        (the planner takes the primary key's order and filters: 140,000 rows for an old
        batch): one probe of the (parent, id) index."""
        shards = Job.objects.filter(parent_id=batch).aggregate(last=models.Max("pk"))
        rows = models.Q(pk=batch) | models.Q(parent_id=batch)
        return rows & models.Q(pk__lte=shards["last"] or batch)

    @staticmethod
    def late_for_deadline(moment) -> models.Q:
        """The jobs that, started at `moment` and running their whole runtime limit, would end
        after their deadline (Slurm's --deadline: no ending is possible before it). Excluded,
        it keeps the jobs with no deadline: Django asks IS NOT NULL inside the negation."""
        return models.Q(deadline__lt=models.Value(moment) + duration_of("max_runtime_s"))

    def batch(self):
        """This batch's shards, itself first (in id order); just itself for any other job."""
        return Job.objects.filter(models.Q(pk=self.pk) | models.Q(parent_id=self.pk)).order_by("pk")

    def shard_states(self) -> dict[str, int]:
        """How many of the batch's shards are in each state (one query), in the lifecycle's
        order (queued, scheduled, running, succeeded, failed, canceled), so pages and answers
        list them alike whatever order the database groups them in."""
        counts = self.batch().order_by().values("state").annotate(n=models.Count("pk"))
        found = {row["state"]: row["n"] for row in counts}
        return {state: found[state] for state in State.values if state in found}

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE

    def retries_exit(self, exit_code: int | None) -> bool:
        """Whether an exit of its own code with this code is retried (within max_retries):
        any, with retry_user_errors; else those of retry_exit_codes, a signal's as 128+N."""
        return self.retry_user_errors or shell_code(exit_code) in self.retry_exit_codes

    @property
    def gpu_milli_per_worker(self) -> int:
        return self.gpus * 1000 or self.gpu_milli

    @property
    def checkpoint_dir(self) -> str:
        """The same directory for every attempt of the job, so a retry can resume."""
        return f"{self.tenant.slug}/{self.pk}"


def shell_code(exit_code: int | None) -> int | None:
    """An exit code as a shell and Kubernetes give it: a process killed by signal N, which
    a local agent of an earlier release reported as -N (Python's returncode), is 128+N."""
    return 128 - exit_code if exit_code is not None and exit_code < 0 else exit_code


def duration_of(field: str, unit_s: int = 1) -> models.ExpressionWrapper:
    """A field counting seconds (a runtime limit), or units of ``unit_s`` seconds, as a
    duration, in SQL. Typed a plain integer: SQLite (the embedded mode) multiplies a duration
    by nothing else."""
    seconds = models.ExpressionWrapper(models.F(field), output_field=models.IntegerField())
    one = models.Value(timedelta(seconds=unit_s))
    return models.ExpressionWrapper(seconds * one, output_field=models.DurationField())


class Dependency(models.Model):
    """`job` is placed only once `on` has ended as its `kind` asks (Slurm's --dependency): it
    succeeded (afterok), it ended in any way (afterany), it failed or was canceled
    (afternotok). Once `on` has ended otherwise, `job` can never run and is canceled with it
    (jobs.actions.cancel_dependents).

    `job` is a single job or a batch's first shard (its shards wait with it); `on` likewise,
    a batch meaning every shard of it: ended once every shard has, succeeded once every shard
    has. Both are deleted with either job: retention prunes only ended jobs, and a dependency
    that ended was met (or its dependents were canceled with it).

    `on` is earlier than `job` when the submission named it, and may be later once the links
    are changed (jobs.actions.set_dependencies, which refuses a cycle).
    """

    class Kind(models.TextChoices):
        AFTEROK = "afterok"
        AFTERANY = "afterany"
        AFTERNOTOK = "afternotok"

    # The unique (job, on) index serves the lookups by job, with the kind beside them (the
    # snapshot's filter reads a job's links from the index alone); `on` has its own (the
    # cascade).
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="dependency_links", db_index=False
    )
    on = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependent_links")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.AFTEROK)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job", "on"], include=["kind"], name="dependency_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} {self.on_id}"


class Attempt(models.Model):
    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded"
        USER_ERROR = "user_error"
        INFRA_ERROR = "infra_error"
        PREEMPTED = "preempted"
        LOST = "lost"
        TIMEOUT = "timeout"
        CANCELED = "canceled"
        GPU_IDLE = "gpu_idle"  # its GPUs read idle past its tenant's limit: stopped

    class StopCause(models.TextChoices):
        """Who asked a preempted attempt to stop: the preemption rate counts the scheduler's
        own preemptions, not the stops that requeue work for other reasons."""

        PREEMPTION = "preemption"  # the scheduler, to make room for higher-priority work
        REQUEUE = "requeue"  # a user or admin requeued its job
        DRAIN = "drain"  # an admin drained its nodes
        MAINTENANCE = "maintenance"  # a maintenance window over its nodes began
        BOOKING = "booking"  # another team's booking of its nodes began
        GROW = "grow"  # the scheduler, to restart its elastic gang with more workers

    # Why the attempts of a cluster whose agent went quiet are lost: a fault of the cluster's
    # link to the control plane, not of their nodes.
    AGENT_SILENT = "its cluster agent stopped reporting"
    # The outcomes a node's fault ends an attempt with (node_fault).
    NODE_FAULTS = (Outcome.INFRA_ERROR, Outcome.LOST)

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField()
    # Its gang's size: the job's workers, or fewer for an elastic gang started smaller.
    workers = models.PositiveSmallIntegerField(
        default=1, db_default=1, help_text="The workers it started (its gang's world size)."
    )
    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True, on_delete=models.PROTECT)
    outcome = models.CharField(max_length=12, choices=Outcome.choices, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.CharField(max_length=300, blank=True)
    scheduled_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    worker_ran_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the agent first reported one of its workers past pending. From then on a "
        "worker the agent no longer finds is lost: never started again inside this attempt.",
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    # When its job's webhook was told it had used 90 % of its runtime limit (its claim:
    # jobs.time_limit_alerts); null: not told.
    time_limit_told_at = models.DateTimeField(null=True, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=12, choices=Outcome.choices, blank=True)
    stop_cause = models.CharField(
        max_length=12,
        choices=StopCause.choices,
        blank=True,
        default="",
        db_default="",  # rows an older release writes while this one rolls out: none
        help_text="Who asked the attempt to stop as preempted, set with the stop request "
        "(empty: nobody).",
    )
    restart_workers = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Stopped to grow: the workers its elastic gang restarts with, whose room the "
        "scheduler holds while it stops (null: not stopped to grow).",
    )
    wasted_gpu_seconds = models.FloatField(
        default=0.0,
        help_text="GPU-seconds reserved but not doing useful work: the wait between scheduled "
        "and running, a lost attempt's whole run, work since the last checkpoint when preempted, "
        "the whole run of a retry stopped because a lost attempt's late success came first.",
    )
    cpu_seconds = models.FloatField(
        null=True,
        blank=True,
        help_text="CPU time its workers' processes have used together, so far or in all, as "
        "their cluster's agent measured it (null: not measured).",
    )
    memory_peak_mb = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The most memory one of its workers has held, in MiB (null: not measured).",
    )
    gpu_busy_seconds = models.FloatField(
        null=True,
        blank=True,
        help_text="GPU-seconds its workers' whole GPUs were busy, estimated from their "
        "utilization as their agent read it (null: not measured).",
    )
    gpu_idle_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Since when every GPU it holds has read idle at every sample (null: busy, "
        "or not measured).",
    )
    # The run of counts its agent's GPU-seconds are in (the backend's usage_epoch), and what
    # was counted before that run began: a restarted agent that counts from 0 again counts on
    # top of it (clusters.agents.record_usage).
    gpu_epoch = models.CharField(max_length=64, blank=True, default="", db_default="")
    gpu_counted_before = models.FloatField(default=0.0, db_default=0.0)
    # Null and "" differ: not recorded, and no GPU.
    gpu_type = models.CharField(  # noqa: DJ001
        max_length=64,
        null=True,
        blank=True,
        help_text="The GPU type its workers run on, empty for CPU-only work (usage reports read "
        "it: allocation rows are deleted after the log retention). Null: not recorded.",
    )

    class Meta:
        ordering = ["job", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="attempt_unique_number"),
            # At most one live attempt per job: a job never runs twice at once.
            models.UniqueConstraint(
                fields=["job"], condition=models.Q(outcome=""), name="attempt_one_live_per_job"
            ),
        ]
        indexes = [
            # /metrics and the overview (attempts ended or started in the last day), and
            # jobs.retention (attempts ended before the log retention cutoff).
            models.Index(fields=["ended_at"], name="attempt_ended_at"),
            models.Index(fields=["started_at"], name="attempt_started_at"),
        ]

    def __str__(self) -> str:
        return f"{self.job} attempt {self.number}"

    @classmethod
    def node_fault(cls, path: str = "") -> models.Q:
        """Attempts that ended for a node's fault: an infrastructure failure there (a GPU
        error, an eviction, a worker that never started) or their workers lost, but not lost
        with their cluster's agent, nor failed for the platform (a registry's outage, a
        missing secret: ``backends.base.PLATFORM_FAULT``), which say nothing of the node.
        ``path``: the way to the attempt from the model queried (``"attempt__"``)."""
        outcome = models.Q(**{f"{path}outcome__in": cls.NODE_FAULTS})
        platform = models.Q(**{f"{path}reason__iregex": base.PLATFORM_FAULT}) & ~models.Q(
            **{f"{path}reason__iregex": base.NODE_FAULT_ALL_THE_SAME}
        )
        return outcome & ~models.Q(**{f"{path}reason": cls.AGENT_SILENT}) & ~platform

    @property
    def node_faulted(self) -> bool:
        """Whether it ended for a node's fault (``node_fault``)."""
        platform = re.search(base.PLATFORM_FAULT, self.reason, re.IGNORECASE) and not re.search(
            base.NODE_FAULT_ALL_THE_SAME, self.reason, re.IGNORECASE
        )
        return (
            self.outcome in self.NODE_FAULTS and self.reason != self.AGENT_SILENT and not platform
        )

    @property
    def is_live(self) -> bool:
        return not self.outcome

    def nodes(self) -> list[dict]:
        """Where its workers ran, in node order: each node's name, the GPUs it held there by
        index, and the thousandths of each it held (1000: whole GPUs). Read off its
        allocations, prefetched with their nodes (`allocations__node`); empty once retention
        has deleted them (MLSCHED_LOG_RETENTION_DAYS after its end)."""
        held: dict[str, dict] = {}
        for row in self.allocations.all():
            node = held.setdefault(row.node.name, {"node": row.node.name, "gpus": []})
            if row.gpu_index is not None:
                node["gpus"].append(row.gpu_index)
                node["gpu_milli"] = row.gpu_milli
        return [{**node, "gpus": sorted(node["gpus"])} for _, node in sorted(held.items())]

    def where(self) -> str:
        """nodes(), as the job page says it: "gpu-a (GPUs 0, 1), gpu-b (GPUs 0, 1)"."""
        return ", ".join(where_on(node) for node in self.nodes())


# The rows kept beside the jobs (jobs/records.py) and the daily usage roll-up's
# (jobs/usage_days.py): imported here, where Django looks for an app's models.
from jobs.records import BudgetAlert, JobEvent, LogChunk, SchedulerShard  # noqa: E402, F401
from jobs.usage_days import GpuTypeUsageDay, UsageDay  # noqa: E402, F401
