"""The agent loop: report, receive the desired state, make the backend match it.

    1. status     what the backend runs now (after a restart: what it finds again)
    2. logs       ship new output lines (kept and resent while the control plane is away);
                  before the heartbeat, so a job is never seen ended with its last lines missing
    3. heartbeat  report the status; the answer is what should run and what should stop
    4. reconcile  start what should run and does not; stop what should not run and does;
                  forget what has ended and been reported

The agent keeps no state the control plane needs: killed and restarted, it finds its workers
through the backend and carries on.
"""

import logging
import threading
from collections import defaultdict

import requests

from clusters.agent.client import ControlPlane
from clusters.backends import base

log = logging.getLogger(__name__)

ACTIVE = {base.PENDING, base.RUNNING}
INVENTORY_EVERY = 30  # steps between inventory reports
MAX_BUFFERED_LINES = 100_000


def spec_from_dict(data: dict) -> base.AttemptSpec:
    workers = tuple(
        base.WorkerSpec(**{**w, "gpu_indices": tuple(w["gpu_indices"])}) for w in data["workers"]
    )
    return base.AttemptSpec(**{**data, "command": tuple(data["command"]), "workers": workers})


def refused(error: requests.HTTPError) -> bool:
    """Whether the control plane turned the request down for its content (400)."""
    return error.response is not None and error.response.status_code == 400


class Agent:
    def __init__(self, control: ControlPlane, backend: base.Backend, interval: float = 1.0):
        self.control = control
        self.backend = backend
        self.interval = interval
        self.steps = 0
        self.unsent: list[base.LogLine] = []
        self.stopping: set[int] = set()

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except requests.RequestException as error:
                log.warning("control plane unreachable (%s); workers keep running", error)
            except Exception:
                log.exception("agent step failed; the next one retries")
            stop.wait(self.interval)

    def step(self) -> None:
        if self.steps % INVENTORY_EVERY == 0:
            try:
                self.control.inventory(self.backend.inventory())
            except requests.HTTPError as error:
                # Refused now, refused again: the heartbeat must not wait on it.
                if not refused(error):
                    raise
                log.error("control plane refused the inventory: %s", error)
        self.steps += 1
        statuses = self.backend.status()  # 1
        self.ship_logs()  # 2
        state = self.control.heartbeat(statuses)  # 3
        self.reconcile(state, statuses)  # 4

    def ship_logs(self) -> None:
        self.unsent.extend(self.backend.logs())
        del self.unsent[:-MAX_BUFFERED_LINES]  # a long outage drops the oldest lines
        for start in range(0, len(self.unsent), 5000):
            batch = self.unsent[start : start + 5000]
            try:
                self.control.logs(batch)
            except requests.HTTPError as error:
                # A batch the control plane refuses would be refused again: sending it forever
                # would hold back every heartbeat behind it.
                if not refused(error):
                    raise
                log.error("control plane refused %d log lines, dropped: %s", len(batch), error)
        self.unsent.clear()

    def reconcile(self, state: dict, statuses: list[base.WorkerStatus]) -> None:
        wanted = {spec["attempt_id"]: spec for spec in state["run"]}
        to_stop = {s["attempt_id"]: s["grace_s"] for s in state["stop"]}
        phases: dict[int, set[str]] = defaultdict(set)
        for status in statuses:
            phases[status.attempt_id].add(status.phase)
        for attempt_id, spec in wanted.items():
            if attempt_id not in phases:
                self.backend.start(spec_from_dict(spec))
        for attempt_id, seen in phases.items():
            running = bool(seen & ACTIVE)
            if attempt_id in to_stop or (attempt_id not in wanted and running):
                # Stopped on request, or no longer wanted (it ended elsewhere in its gang, or was
                # given up while this agent was away): stop it, once.
                if running and attempt_id not in self.stopping:
                    grace = to_stop.get(attempt_id, 10)
                    self.backend.stop(attempt_id, grace)
                    self.stopping.add(attempt_id)
            elif attempt_id not in wanted and not running:
                self.backend.forget(attempt_id)  # ended, reported, and its logs are shipped
                self.stopping.discard(attempt_id)
