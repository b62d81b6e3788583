"""Tenants' data volumes (``TenantVolume``): which a job may mount and where, on which clusters
each is, and what the cluster's agent is told of them as an attempt starts.

A job names volumes (``Job.volumes``), each with the path its workers see it at and whether
it only reads it. The scheduler places it only on clusters that have every one of them
(``on_clusters``: the volume's clusters, and a claim on a Kubernetes cluster, a host folder on
a local one), and the agent is told where each is when an attempt is handed to it
(``for_spec``): a volume deleted while the job waited fails it then, saying which.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Mapping

from clusters.backends.base import KUBERNETES
from quotas.models import Tenant, TenantVolume
from quotas.tenant_secrets import InUse

MAX_VOLUMES_PER_JOB = 16
# Where the platform puts what every worker needs (its secret files, the checkpoint volume of
# Kubernetes clusters, the system): no volume is mounted over or under them.
RESERVED_PATHS = (
    "/var/run/mlsched", "/checkpoints", "/proc", "/sys", "/dev", "/etc", "/bin", "/usr",
)  # fmt: skip


def path_problem(path: str) -> str:
    """Why a volume may not be mounted at ``path``, "" if it may."""
    if not path.startswith("/") or "\x00" in path:
        return f"{path[:80]!r} is not an absolute path."
    if posixpath.normpath(path) != path or path == "/" or "//" in path:
        return f"{path[:80]!r} is not a plain path: no '..', '.', '//' or trailing '/', not '/'."
    for reserved in RESERVED_PATHS:
        if path == reserved or path.startswith(reserved + "/") or reserved.startswith(path + "/"):
            return f"{path!r} is at, under or over {reserved}, which the platform keeps."
    return ""


def mounts_problem(mounts: list[dict]) -> str:
    """Why these mounts cannot stand together, "" if they can: each volume once, no path
    twice or inside another."""
    names = [m["name"] for m in mounts]
    if len(set(names)) < len(names):
        return "A volume is named twice."
    paths = sorted(m["path"] for m in mounts)
    for outer, inner in zip(paths, paths[1:], strict=False):
        if inner == outer or inner.startswith(outer + "/"):
            return f"{inner!r} is at or inside {outer!r}: each volume has a path of its own."
    return ""


def unusable(tenant: Tenant, mounts: list[dict]) -> str:
    """Why a job of the tenant may not mount these, "" if it may: one is not the tenant's, or
    is asked to be written and may only be read."""
    names = {m["name"] for m in mounts}
    writable = dict(
        TenantVolume.objects.filter(tenant=tenant, name__in=names).values_list("name", "writable")
    )
    if missing := sorted(names - set(writable)):
        return f"Tenant {tenant.slug!r} has no volume {missing[0]!r}: a platform admin adds it."
    for mount in mounts:
        if not mount["read_only"] and not writable[mount["name"]]:
            return f"The volume {mount['name']!r} is read only: set read_only."
    return ""


def jobs_mounting(volume: TenantVolume, *, writing: bool = False) -> list[int]:
    """The ids of the volume's tenant's jobs not yet ended that mount it (``writing``: to
    write to it), under the tenant's row lock, which a submission naming volumes takes too
    (jobs.actions.submission.check_volumes): neither passes the other unseen."""
    from jobs.models import Job  # the jobs app loads after this one

    Tenant.objects.select_for_update().get(pk=volume.tenant_id)
    live = Job.objects.filter(tenant_id=volume.tenant_id).live().exclude(volumes=[])
    # Read in Python, as the embedded mode's SQLite has no JSON containment.
    rows = live.values_list("pk", "volumes")
    named = [(pk, m) for pk, mounts in rows for m in mounts if m["name"] == volume.name]
    return sorted(pk for pk, m in named if not (writing and m.get("read_only", True)))


def volume_in_use(volume: TenantVolume, job_ids: list[int], change: str = "deleted") -> InUse:
    return InUse(
        f"mount the volume {volume.name!r}", job_ids, f"it can be {change} once they have ended."
    )


def delete(volume: TenantVolume) -> None:
    """Delete the volume; InUse while jobs not yet ended mount it."""
    if users := jobs_mounting(volume):
        raise volume_in_use(volume, users)
    TenantVolume.objects.filter(pk=volume.pk).delete()  # the instance keeps its id, to log


def closing_problem(volume: TenantVolume) -> str:
    """Why the writable volume cannot be made read only, "" if it can: jobs not yet ended write
    to it, whose workers were promised it (the run spec reads each job's own read_only)."""
    if volume.pk is None or not volume.writable:
        return ""
    writing = jobs_mounting(volume, writing=True)
    return str(volume_in_use(volume, writing, "made read only")) if writing else ""


def for_spec(tenant_id: int, mounts: list[dict]) -> tuple[tuple[dict, ...], str]:
    """The job's mounts as the run spec carries them (with each volume's claim and host
    folder), and "" ; or () and why not: a volume it names no longer exists."""
    if not mounts:
        return (), ""
    found = {
        v.name: v for v in TenantVolume.objects.filter(tenant_id=tenant_id,
                                                       name__in=[m["name"] for m in mounts])
    }  # fmt: skip
    if missing := [m["name"] for m in mounts if m["name"] not in found]:
        return (), f"its team's volume {missing[0]!r} no longer exists"
    return tuple(
        {
            "name": m["name"],
            "path": m["path"],
            "read_only": bool(m.get("read_only", True)),
            "claim": found[m["name"]].claim,
            "host_path": found[m["name"]].host_path,
        }
        for m in mounts
    ), ""


# {tenant id: {volume name: (its cluster ids, or None for every cluster; whether it has a
# claim; whether it has a host folder)}}
Places = Mapping[int, Mapping[str, tuple[frozenset[int] | None, bool, bool]]]


def places() -> Places:
    """Where each tenant's volumes are (one query, and one more if there are any)."""
    rows = list(TenantVolume.objects.values_list("id", "tenant_id", "name", "claim", "host_path"))
    if not rows:
        return {}
    on: dict[int, set[int]] = defaultdict(set)
    through = TenantVolume.clusters.through.objects.filter(
        tenantvolume_id__in=[row[0] for row in rows]
    ).values_list("tenantvolume_id", "cluster_id")
    for volume, cluster in through:
        on[volume].add(cluster)
    found: dict[int, dict] = defaultdict(dict)
    for pk, tenant, name, claim, host_path in rows:
        clusters = frozenset(on[pk]) if pk in on else None
        found[tenant][name] = (clusters, bool(claim), bool(host_path))
    return found


def on_cluster(places: Places, tenant_id: int, mounts: list[dict], cluster: dict) -> bool:
    """Whether the cluster (a row with its ``id`` and ``backend``) has every volume mounted."""
    theirs = places.get(tenant_id, {})
    for mount in mounts:
        place = theirs.get(mount["name"])
        if place is None:
            return False
        clusters, claim, host_path = place
        if clusters is not None and cluster["id"] not in clusters:
            return False
        if not (claim if cluster["backend"] == KUBERNETES else host_path):
            return False
    return True
