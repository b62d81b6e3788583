"""The job's data volumes on the local backend: folders on the host, as the platform admin
registered them (a tenant volume's host folder, the same on every host of the cluster).

With no container, a worker cannot see a volume at the path its job asked for. It is told the
volume's folder on the host instead (MLSCHED_VOLUME_<NAME> holds it), and finds a symlink to it
at `volumes/<name>` in its own directory (beside its working directory: `../volumes/<name>`
from there), which forget removes with the directory (the link, never what it points at). A
volume without a host folder, or whose folder is not on this host, fails the attempt before it
runs.

Read-only is not enforced: that takes a read-only bind mount in a mount namespace of the
worker's own, which this backend does not make. A worker may write whatever its user may in the
folder, read_only or not; the folder's own permissions are all that hold it (with
`--worker-uids`, give the tenant's user read access alone where its jobs only read).
"""

import os
import re
from pathlib import Path

from clusters.backends import base

# A worker's links to its job's data volumes: in this folder of its own directory, by name.
VOLUMES = "volumes"
# A data volume's name as the control plane checks it (quotas.models.validate_volume_name): a
# DNS label, so never a path that would leave the worker's folder.
VOLUME_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def volumes_problem(volumes: tuple[dict, ...]) -> str:
    """Why the job's data volumes cannot be given to its workers on this host, "" if they can:
    one is not named as a DNS label, or has no host folder (a volume of Kubernetes clusters
    alone: the control plane places its jobs elsewhere, but its folder may have been removed
    since), or its folder is not a folder on this host."""
    for volume in volumes:
        name, folder = str(volume.get("name", "")), str(volume.get("host_path", ""))
        if not VOLUME_NAME.fullmatch(name):
            return f"its data volume {name[:100]!r} is not named as a DNS label"
        if not folder:
            return f"its data volume {name!r} has no host folder: a local cluster cannot mount it"
        if not os.path.isabs(folder) or not Path(folder).is_dir():
            return f"its data volume {name!r}: the host folder {folder[:200]!r} is not on this host"
    return ""


def volume_folders(volumes: tuple[dict, ...]) -> dict[str, str]:
    """The variables telling a worker where each data volume is: its folder on the host (a
    worker has no container to see it at the path its job asked for)."""
    return {base.volume_variable(volume["name"]): volume["host_path"] for volume in volumes}


def link_volumes(folder: Path, volumes: tuple[dict, ...], uid: int | None) -> None:
    """A symlink in ``folder`` to each data volume's host folder, by the volume's name, the
    folder mode 0700 and owned by the worker's user (``uid``; None: the agent's). Forget's
    removal of the worker's directory unlinks them and never follows them. Nothing here makes a
    volume read-only (see the module's docstring)."""
    if not volumes:
        return
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)  # whatever the agent's umask
    for volume in volumes:
        link = folder / volume["name"]
        if not link.is_symlink():
            link.symlink_to(volume["host_path"], target_is_directory=True)
    if uid is not None:
        os.chown(folder, uid, uid)
