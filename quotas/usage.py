"""What each tenant uses now, by resource flavor, from the live allocations."""

from collections import defaultdict

from django.db.models import Sum

from clusters.models import GPU_MILLI, Allocation


def usage_by_tenant(tenant_ids) -> dict[int, dict[str, float]]:
    """{tenant id: {flavor: amount}}: cpu in millicores, memory in MiB, gpu:<type> in GPUs."""
    rows = (
        Allocation.objects.active()
        .filter(attempt__job__tenant_id__in=tenant_ids)
        .values("attempt__job__tenant_id", "node__gpu_type")
        .annotate(cpu=Sum("cpu_milli"), memory=Sum("memory_mb"), gpu=Sum("gpu_milli"))
    )
    usage: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        tenant = usage[row["attempt__job__tenant_id"]]
        tenant["cpu"] += row["cpu"] or 0
        tenant["memory"] += row["memory"] or 0
        if row["gpu"]:
            tenant[f"gpu:{row['node__gpu_type']}"] += row["gpu"] / GPU_MILLI
    return usage
