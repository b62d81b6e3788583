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


def class_gpus_held(user_id: int | None = None) -> tuple[dict[int, float], dict[int, float]]:
    """The GPUs the live allocations hold by priority class (its id), every team's together
    (no team named) and those of the user `user_id`, as a class's GPU limits count them: one
    grouped query."""
    held: dict[int, float] = defaultdict(float)
    theirs: dict[int, float] = defaultdict(float)
    rows = (
        Allocation.objects.active()
        .filter(gpu_index__isnull=False)
        .values_list("attempt__job__priority_class_id", "attempt__job__owner_id")
        .annotate(milli=Sum("gpu_milli"))
        .order_by()
    )
    for rank, owner, milli in rows:
        held[rank] += milli / GPU_MILLI
        if owner == user_id:
            theirs[rank] += milli / GPU_MILLI
    return held, theirs
