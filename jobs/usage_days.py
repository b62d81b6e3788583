"""The daily usage roll-up's rows (jobs.rollup writes them, jobs.reports reads them): each
tenant's jobs, and its attempts by GPU type, over one UTC day."""

from django.db import models


class UsageDay(models.Model):
    """One tenant's jobs over one UTC day, rolled up once the day has settled (jobs.rollup): so
    usage outlives the jobs retention deletes, and a long report reads days, not attempts.
    Every tenant gets a row for every rolled day, zeros included: the last day is how far the
    roll-up has gone."""

    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    jobs_succeeded = models.PositiveIntegerField(default=0)
    jobs_failed = models.PositiveIntegerField(default=0)
    jobs_canceled = models.PositiveIntegerField(default=0)
    jobs_started = models.PositiveIntegerField(default=0)
    wait_seconds = models.FloatField(default=0.0, help_text="Queue waits of the jobs started.")
    # The started jobs' waits counted in buckets (jobs.rollup.bucket), {bucket: jobs}: a 95th
    # percentile over several days can be read from their sum.
    wait_buckets = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "day"], name="usageday_tenant_day")
        ]
        indexes = [models.Index(fields=["day"], name="usageday_day")]

    def __str__(self) -> str:
        return f"tenant {self.tenant_id} on {self.day}"


class GpuTypeUsageDay(models.Model):
    """One tenant's attempts on one GPU type over one UTC day (usage_queries.TypeUsage's figures in
    seconds): "" runs no GPU, null lost its allocation rows."""

    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    gpu_type = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    gpu_seconds = models.FloatField(default=0.0)
    cpu_core_seconds = models.FloatField(default=0.0)
    wasted_gpu_seconds = models.FloatField(default=0.0)
    preempted_gpu_seconds = models.FloatField(default=0.0)
    # Right-sizing (usage_queries.TypeUsage): the measured attempts' core-seconds asked for and kept
    # busy, and their memory asked for beyond the peak in MiB-seconds. Days rolled up before
    # attempts were measured have zeros (db_default).
    cpu_core_seconds_measured = models.FloatField(default=0.0, db_default=0.0)
    cpu_core_seconds_busy = models.FloatField(default=0.0, db_default=0.0)
    memory_mib_seconds_unused = models.FloatField(default=0.0, db_default=0.0)
    # The runs and runtime limits of the attempts that succeeded (usage_queries.TypeUsage).
    succeeded_run_seconds = models.FloatField(default=0.0, db_default=0.0)
    succeeded_limit_seconds = models.FloatField(default=0.0, db_default=0.0)
    # The GPU-seconds asked for and busy of the attempts whose GPU time was measured.
    gpu_seconds_measured = models.FloatField(default=0.0, db_default=0.0)
    gpu_seconds_busy = models.FloatField(default=0.0, db_default=0.0)

    class Meta:
        indexes = [models.Index(fields=["tenant", "day"], name="gputypeday_tenant_day")]

    def __str__(self) -> str:
        return f"tenant {self.tenant_id} on {self.day}, GPU type {self.gpu_type}"
