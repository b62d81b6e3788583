"""What is kept beside the jobs: the audit trail of their transitions, their log lines, each
scheduler shard's heartbeat and the GPU-hour budget alerts sent."""

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
    """A threshold of a tenant's GPU-hour budget (80 or 100 % of a month's) its webhook was
    told its attempts had reached (jobs.budget_alerts): at most one a tenant, month and
    threshold. The row is the claim: whoever inserts it sends the notification, and the figures
    it was sent with stay here, so that every try posts the same document."""

    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="+")
    month = models.DateField(help_text="The month's first day (UTC).")
    percent = models.PositiveSmallIntegerField()
    budget_gpu_hours = models.PositiveIntegerField(help_text="The month's budget when it was sent.")
    spent_gpu_hours = models.FloatField(help_text="What the month had used when it was sent.")
    sent_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "month", "percent"], name="budgetalert_unique_threshold"
            ),
        ]

    def __str__(self) -> str:
        return f"tenant {self.tenant_id}: {self.percent} % of {self.month:%Y-%m}"
