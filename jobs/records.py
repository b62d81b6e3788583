"""What is kept beside the jobs: the audit trail of their transitions, their log lines, each
scheduler shard's heartbeat and the budget alerts sent (GPU-hours, spend)."""

from django.db import models
from django.utils import timezone

from jobs.states import State


class JobEvent(models.Model):
    """One transition of one job (or, from = to, a lost attempt's late success not taken): the
    audit trail, the source of metrics, the live feed."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="events")
    attempt = models.ForeignKey("jobs.Attempt", null=True, blank=True, on_delete=models.SET_NULL)
    from_state = models.CharField(max_length=12, choices=State.choices, blank=True)
    to_state = models.CharField(max_length=12, choices=State.choices)
    reason = models.CharField(max_length=300, blank=True)
    time = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["time", "id"]
        indexes = [models.Index(fields=["job", "time"], name="jobevent_job_time")]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state or '-'} -> {self.to_state}"


class LogChunk(models.Model):
    class Stream(models.TextChoices):
        STDOUT = "stdout"
        STDERR = "stderr"

    attempt = models.ForeignKey("jobs.Attempt", on_delete=models.CASCADE, related_name="log_chunks")
    worker = models.PositiveIntegerField(default=0)
    seq = models.PositiveIntegerField()
    stream = models.CharField(max_length=6, choices=Stream.choices, default=Stream.STDOUT)
    text = models.TextField()
    created = models.DateTimeField(default=timezone.now)
    # When the worker wrote the line, where the backend's substrate stamps lines (Kubernetes);
    # empty otherwise (local). A restarted agent numbers a rotated log on from the last line's
    # stamp (clusters.agents.log_resumes).
    logged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["attempt", "worker", "seq"]
        constraints = [
            # Agents resend chunks after a failure; the sequence number makes that harmless.
            models.UniqueConstraint(
                fields=["attempt", "worker", "seq"], name="logchunk_unique_seq"
            ),
        ]
        # A job's lines after the last one a reader saw: a poll reads its own attempts' lines.
        indexes = [models.Index(fields=["attempt", "id"], name="logchunk_attempt_id")]

    def __str__(self) -> str:
        return f"attempt {self.attempt_id} worker {self.worker} #{self.seq}"


class SchedulerShard(models.Model):
    """A scheduler shard's heartbeat: when it last ran a cycle and committed placements.

    Health checks read it to see missing ticks; every commit batch bumps it last, inside the
    batch's transaction.
    """

    name = models.SlugField(max_length=50, unique=True)
    last_cycle_at = models.DateTimeField(null=True, blank=True)
    last_commit_at = models.DateTimeField(null=True, blank=True)
    cycles = models.PositiveBigIntegerField(default=0)
    placements = models.PositiveBigIntegerField(default=0)
    last_cycle_seconds = models.FloatField(default=0.0)
    last_cycle_jobs = models.PositiveIntegerField(default=0, help_text="Queued jobs it decided.")

    def __str__(self) -> str:
        return self.name

    @classmethod
    def bump(cls, name: str, **changes) -> None:
        """Update the shard's row, creating it the first time: one UPDATE when it exists."""
        if not cls.objects.filter(name=name).update(**changes):
            cls.objects.get_or_create(name=name)
            cls.objects.filter(name=name).update(**changes)


class BudgetAlert(models.Model):
    """A threshold (80 or 100 % of a month's) of a tenant's GPU-hour budget, or of its spend
    alert, its webhook and owners were told it had reached (jobs.budget_alerts): at most one a
    tenant, month, kind and threshold. The row is the claim: whoever inserts it sends the
    notification, and the figures it was sent with stay here (GPU-hours, or money in the
    platform's currency, as its kind is), so that every try posts the same document."""

    class Kind(models.TextChoices):
        GPU_HOURS = "gpu_hours", "GPU-hour budget"
        SPEND = "spend", "spend alert"

    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="+")
    month = models.DateField(help_text="The month's first day (UTC).")
    # Rows from before spend alerts are GPU-hour ones.
    kind = models.CharField(
        max_length=10, choices=Kind.choices, default=Kind.GPU_HOURS, db_default=Kind.GPU_HOURS
    )
    percent = models.PositiveSmallIntegerField()
    budget_gpu_hours = models.PositiveIntegerField(
        null=True, blank=True, help_text="The month's GPU-hour budget when it was sent."
    )
    spent_gpu_hours = models.FloatField(
        null=True, blank=True, help_text="The GPU-hours the month had used when it was sent."
    )
    budget_spend = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text="The month's spend alert when it was sent.",
    )  # fmt: skip
    spent_spend = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True,
        help_text="What the month's usage had cost when it was sent, at the rate card then.",
    )  # fmt: skip
    sent_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "month", "kind", "percent"], name="budgetalert_unique_threshold"
            ),
            # A row's figures are those of its kind, and only those.
            models.CheckConstraint(
                condition=models.Q(
                    kind="gpu_hours", budget_gpu_hours__isnull=False,
                    spent_gpu_hours__isnull=False, budget_spend__isnull=True,
                    spent_spend__isnull=True,
                )
                | models.Q(
                    kind="spend", budget_gpu_hours__isnull=True, spent_gpu_hours__isnull=True,
                    budget_spend__isnull=False, spent_spend__isnull=False,
                ),
                name="budgetalert_figures_of_its_kind",
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        return f"tenant {self.tenant_id}: {self.percent} % of {self.month:%Y-%m} ({self.kind})"
