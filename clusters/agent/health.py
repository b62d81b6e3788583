"""A node health check (Slurm's HealthCheckProgram, as NHC runs it): a platform admin's command
the agent runs for each node of its cluster every so often, in threads of their own. A node
whose check exits 0 is reported as the backend sees it; one whose check fails (another exit, a
kill, no exit within its timeout, a command that cannot run) is reported not ready, the check's
last line of output as why, until a later check passes: it takes no new work, and what runs
there runs on, as a node Slurm's health check drains.

The command runs with `/bin/sh -c` where the agent runs (a local cluster's host; a Kubernetes
cluster's agent pod, where a check reads what it can reach of the node, its DCGM exporter,
Prometheus), told which node in MLSCHED_NODE (with MLSCHED_NODE_GPUS and MLSCHED_NODE_GPU_TYPE).
A node is not reported ready before its first check passes ("health check not run yet"): the
thread checks a node at once when the inventory first lists it (at the agent's start, every
node), then each interval.
"""

import contextlib
import dataclasses
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from clusters.backends.base import NodeInventory

log = logging.getLogger(__name__)

NOT_YET = "health check not run yet"
# Checks run at once: a pass over a large cluster is not one check's timeout per node.
AT_ONCE = 8
MAX_REASON = 200  # of the 300 characters the control plane keeps of why a node is not ready
MAX_OUTPUT = 64 * 1024  # of its output, the end is read for the reason


class HealthCheck:
    def __init__(
        self,
        command: str,
        interval_s: float = 300.0,
        timeout_s: float = 60.0,
        changed: Callable[[], None] = lambda: None,
    ):
        self.command = command
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.changed = changed  # called when a node's verdict changes: report the inventory
        self._verdicts: dict[str, str] = {}  # node -> why it fails ("": it passes)
        self._nodes: dict[str, NodeInventory] = {}  # the nodes last listed, by name
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._running: set[subprocess.Popen] = set()  # the checks running now
        self._stopped = False

    def apply(self, nodes: Sequence[NodeInventory]) -> list[NodeInventory]:
        """The nodes as reported: one whose check failed, or has not run yet, not ready with
        why. Remembers them as the nodes to check; a new one is checked at once."""
        with self._lock:
            self._nodes = {node.name: node for node in nodes}
            verdicts = dict(self._verdicts)
        if any(node.name not in verdicts for node in nodes):
            self._wake.set()
        return [self._as_checked(node, verdicts.get(node.name, NOT_YET)) for node in nodes]

    @staticmethod
    def _as_checked(node: NodeInventory, failed: str) -> NodeInventory:
        if not failed or not node.ready:  # the backend's own reason comes first
            return node
        return dataclasses.replace(node, ready=False, not_ready=failed)

    def run_pass(self, only_new: bool = False) -> None:
        """Check the nodes last listed (``only_new``: those never checked), a few at once."""
        with self._lock:
            nodes = [n for n in self._nodes.values() if not (only_new and n.name in self._verdicts)]
        if not nodes:
            return
        with ThreadPoolExecutor(max_workers=min(AT_ONCE, len(nodes))) as pool:
            verdicts = dict(zip((n.name for n in nodes), pool.map(self.check, nodes), strict=True))
        with self._lock:
            if self._stopped:  # its checks were killed, not failed
                return
            before = {name: self._verdicts.get(name) for name in verdicts}
            self._verdicts.update(verdicts)
            for gone in set(self._verdicts) - set(self._nodes):
                del self._verdicts[gone]
        for name, why in verdicts.items():
            if before[name] != why:
                log.warning("node %s: %s", name, why or "health check passes")
        if before != verdicts:
            self.changed()

    def check(self, node: NodeInventory) -> str:
        """Run the command for one node: "" if it exits 0, else why not, in a line."""
        env = {**os.environ, "MLSCHED_NODE": node.name, "MLSCHED_NODE_GPUS": str(node.gpu_count),
               "MLSCHED_NODE_GPU_TYPE": node.gpu_type}  # fmt: skip
        try:
            process = subprocess.Popen(
                ["/bin/sh", "-c", self.command], env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        except OSError as error:
            return f"health check could not run: {error}"[:MAX_REASON]
        with self._lock:
            self._running.add(process)
            if self._stopped:
                kill(process)
        try:
            output, _ = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            kill(process)
            process.communicate()
            return f"health check timed out after {self.timeout_s:g} s"
        finally:
            with self._lock:
                self._running.discard(process)
        if process.returncode == 0:
            return ""
        code = process.returncode
        ended = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        said = last_line(output[-MAX_OUTPUT:].decode("utf-8", "replace"))
        return f"health check failed ({ended}){': ' + said if said else ''}"[:MAX_REASON]

    def run_forever(self, stop: threading.Event) -> None:
        """Check every node each interval, and a node listed for the first time at once."""
        due = time.monotonic() + self.interval_s
        while not (stop.is_set() or self._stopped):
            if time.monotonic() >= due:
                self._safely(self.run_pass)
                due = time.monotonic() + self.interval_s
            elif self._wake.is_set():
                self._wake.clear()
                self._safely(self.run_pass, only_new=True)
            self._wake.wait(min(1.0, max(0.0, due - time.monotonic())))

    def stop(self) -> None:
        """Kill the checks running now, and start no other: the agent stops."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for process in running:
            kill(process)
        self._wake.set()

    def _safely(self, run: Callable[..., None], **kwargs) -> None:
        try:
            run(**kwargs)
        except Exception:
            log.exception("health check pass failed; the next one tries again")


def kill(process: subprocess.Popen) -> None:
    """Kill a check and whatever it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError):  # ended, and reaped, already
        os.killpg(process.pid, signal.SIGKILL)


def last_line(output: str) -> str:
    """The last line with text in it, printable: what NHC and most checks say last is why."""
    for line in reversed(output.splitlines()):
        if shown := "".join(c if c.isprintable() else " " for c in line).strip():
            return shown
    return ""
