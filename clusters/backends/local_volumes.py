"""The job's data volumes on the local backend: folders on the host, as the platform admin
registered them (a tenant volume's host folder, the same on every host of the cluster).

With no container, a worker cannot see a volume at the path its job asked for. It is told the
volume's folder on the host instead (MLSCHED_VOLUME_<NAME> holds it), and finds a symlink to it
at `volumes/<name>` in its own directory (beside its working directory: `../volumes/<name>`
from there), which forget removes with the directory (the link, never what it points at). A
volume without a host folder, or whose folder is not on this host, fails the attempt before it
runs.

A volume the job only reads is read-only to its workers: each worker runs in a mount namespace
of its own in which the volume's folder is bound onto itself read-only (``ReadOnly``), so it
and everything it starts can only read there, while the host, the agent and every other worker
see the folder as it is. An agent running as root makes the namespace itself (before the
worker takes its tenant's user); one that is not makes it inside a user namespace of the
worker's own, which maps only its own user and group (the kernel must allow unprivileged user
namespaces, as Debian's and most distributions' do). Where neither is allowed, the worker fails
before it runs, saying so: a volume is never given writable where read-only was promised.
What is mounted below the folder (another file system) is bound along and made read-only too,
each mount on its own.
"""

import ctypes
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
    removal of the worker's directory unlinks them and never follows them. What the job only
    reads is made read-only by its worker's shim (ReadOnly)."""
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


def read_only_folders(volumes: tuple[dict, ...]) -> list[str]:
    """The host folders of the job's volumes that it only reads."""
    return sorted({v["host_path"] for v in volumes if v.get("read_only", True)})


# unshare(2) and mount(2) flags (linux/sched.h, linux/mount.h), and the statvfs flags of a
# mount that a remount inside a user namespace must keep (their MS_ flag for each).
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
KEPT_FLAGS = {os.ST_NOSUID: 2, os.ST_NODEV: 4, os.ST_NOEXEC: 8, os.ST_NOATIME: 1024,
              os.ST_NODIRATIME: 2048, os.ST_RELATIME: 1 << 21}  # fmt: skip


class ReadOnly:
    """Makes folders read-only for the calling process and what it starts, in a mount
    namespace of its own (the module's docstring). libc is loaded when made, before the fork;
    called in the child, before it takes its tenant's user. OSError naming the step the host
    refused."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)

    def __call__(self, folders: list[str]) -> None:
        if os.geteuid() == 0:
            self._check(self.libc.unshare(CLONE_NEWNS), "a mount namespace")
        else:
            uid, gid = os.getuid(), os.getgid()
            self._check(self.libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "a user namespace")
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                               ("gid_map", f"{gid} {gid} 1")):  # fmt: skip
                Path("/proc/self", name).write_text(text)
        # Nothing done here reaches the host's namespace, nor anything of the host's this one.
        self._check(self.libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "/")
        for folder in folders:
            path = os.fsencode(folder)
            self._check(self.libc.mount(path, path, None, MS_BIND | MS_REC, None), folder)
            # The bind brought along what is mounted below the folder: each is made read-only
            # on its own (a remount changes one mount only).
            for mount in [folder, *mounts_below(os.path.realpath(folder))]:
                kept = os.statvfs(mount).f_flag
                flags = sum(ms for st, ms in KEPT_FLAGS.items() if kept & st)
                remount = MS_REMOUNT | MS_BIND | MS_RDONLY | flags
                self._check(self.libc.mount(None, os.fsencode(mount), None, remount, None), mount)

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number), what)


def mounts_below(folder: str, mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """The mount points strictly below ``folder`` in this mount namespace, as
    /proc/self/mountinfo lists them (its fifth field, in the file system's bytes, with spaces,
    tabs, newlines and backslashes written as octal escapes), each once."""
    below, prefix = [], folder.rstrip("/") + "/"
    for line in Path(mountinfo).read_bytes().splitlines():
        fields = line.split(b" ")
        if len(fields) < 5:
            continue
        point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4]))
        if point.startswith(prefix) and point not in below:
            below.append(point)
    return below
