"""The agent loop: report, receive the desired state, make the backend match it.

    1. status     what the backend runs now (after a restart: what it finds again)
    2. logs       ship new output lines (kept and resent while the control plane is away);
                  before the heartbeat, so a job is never seen ended with its last lines missing
    3. heartbeat  report the status; the answer is what should run and what should stop.
                  Refused for entries it names, it goes again at once without them: the
                  control plane takes their workers for ones the backend no longer finds.
                  It asks too where the control plane's copy of each log the backend waits
                  to number ends (workers found again after a restart): the backend numbers
                  their lines on from there
    4. reconcile  start what should run and does not; stop what should not run and does (and
                  again if it still runs well past its grace); forget what has ended and been
                  reported. It sees every worker the backend has, dropped entries included: a
                  worker is never started twice, and one whose attempt was given up is stopped

Nothing but the heartbeat itself may keep the heartbeat from going: a failing inventory is
retried at the next step, log shipping that keeps failing holds the heartbeat back only a few
steps (past them the cluster would be taken for dead and its work for lost), and a broken entry
costs its own attempt, not the whole report. The agent keeps no state the control plane needs:
killed and restarted, it finds its workers through the backend and carries on.
"""

import dataclasses
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Sequence

import requests

from clusters.agent.client import ControlPlane
from clusters.agent.health import HealthCheck
from clusters.backends import base

log = logging.getLogger(__name__)

ACTIVE = {base.PENDING, base.RUNNING}
INVENTORY_EVERY = 30  # steps between inventory reports
MAX_BUFFERED_LINES = 100_000
BATCH_LINES = 5000
# A log batch's JSON stays well under the control plane's request size limit
# (DATA_UPLOAD_MAX_MEMORY_SIZE), however long or odd its lines.
BATCH_BYTES = 1 << 20
HOLD_HEARTBEAT_STEPS = 10  # failed log shipments in a row that hold the heartbeat back
HEARTBEAT_RESENDS = 2  # a refused report goes again without the entries named, this often
RESTOP_AFTER_S = 30.0  # past a stop's grace, a worker still running is asked to stop again


def spec_from_dict(data: dict) -> base.AttemptSpec:
    """The run spec the control plane sent. Fields this agent does not know are left out: a
    control plane upgraded before its agents may send more (an agent that refused them would
    start nothing until it is upgraded too)."""
    workers = tuple(
        base.WorkerSpec(**known(base.WorkerSpec, w), gpu_indices=tuple(w["gpu_indices"]))
        for w in data["workers"]
    )
    spec = known(base.AttemptSpec, data)
    volumes = tuple(data.get("volumes", ()))
    return base.AttemptSpec(
        **spec, command=tuple(data["command"]), workers=workers, volumes=volumes
    )


def known(kind, data: dict) -> dict:
    """The items of `data` naming fields of the dataclass `kind`, but its tuples (set apart)."""
    names = {field.name for field in dataclasses.fields(kind)}
    tuples = {"gpu_indices", "command", "workers", "volumes"}
    return {key: value for key, value in data.items() if key in names - tuples}


def refused(error: Exception) -> bool:
    """Whether the control plane turned the request down for its content (400) or its size
    (413): sent again, it would be turned down again."""
    if not isinstance(error, requests.HTTPError) or error.response is None:
        return False
    return error.response.status_code in (400, 413)


def refused_entries(error: Exception, count: int) -> dict[int, object]:
    """The heartbeat's entries a 400 names by their position in `workers`, each with the
    control plane's reason; empty if the refusal names anything else.

    DRF names them in an object keyed by position; older releases, which the control plane
    may run, name an entry's own fields in a list with an error object per entry ({} for a
    sound one)."""
    if not refused(error):
        return {}
    try:
        body = error.response.json()
    except ValueError:
        return {}
    errors = body.get("workers") if isinstance(body, dict) else None
    if isinstance(errors, list) and all(isinstance(e, dict) for e in errors):
        errors = dict(enumerate(errors))
    if not isinstance(errors, dict) or not all(str(key).isdigit() for key in errors):
        return {}
    named = {int(key): why for key, why in errors.items() if why}
    return named if named and max(named) < count else {}


def log_resumes(
    waiting: Sequence[tuple[int, int]], state: dict
) -> dict[tuple[int, int], base.LogResume | None]:
    """Where the control plane's copy of each waiting log ends, from the heartbeat's answer
    (None: it has no line of it). A control plane that does not say (an older release) keeps
    no line's stamp: each log is numbered from line 0, as that release expects. A malformed
    entry is left out, to be asked for again."""
    if "resume_logs" not in state:
        return dict.fromkeys(waiting)
    points = {}
    for entry in state["resume_logs"]:
        try:
            points[int(entry["attempt_id"]), int(entry["rank"])] = resume_point(entry)
        except (AttributeError, KeyError, TypeError, ValueError):
            log.warning("malformed log resume point ignored: %r", entry)
    return points


def resume_point(entry: dict) -> base.LogResume | None:
    if entry.get("seq") is None:
        return None
    at = entry.get("at")
    taken = int(entry.get("taken") or 0)
    at = None if at is None else float(at)
    return base.LogResume(int(entry["seq"]), at, taken, first_line(entry.get("first")))


def first_line(first) -> tuple[float, str] | None:
    """Line 0's stamp and head from a resume point; None where the control plane does not say
    (an older release, or no stamped line 0), or says it malformed: the log is then placed by
    its stamps alone, as such a release expects."""
    if not isinstance(first, dict) or not isinstance(first.get("text"), str):
        return None
    try:
        return float(first["at"]), first["text"]
    except (KeyError, TypeError, ValueError):
        return None


def cut(line: base.LogLine) -> base.LogLine:
    """The line as the control plane keeps it: a longer one alone could pass its request
    limit, and be refused and lost whole."""
    if len(line.text) <= base.MAX_LINE:  # at most 12 bytes a character in JSON: fits a batch
        return line
    return dataclasses.replace(line, text=line.text[: base.MAX_LINE])


def batches(lines: list[base.LogLine]):
    """The lines in order, in batches of at most BATCH_LINES lines and about BATCH_BYTES."""
    batch: list[base.LogLine] = []
    size = 0
    for line in lines:
        cost = len(json.dumps(line.text)) + 100  # the text as sent, and the other fields
        if batch and (len(batch) == BATCH_LINES or size + cost > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(line)
        size += cost
    if batch:
        yield batch


class Agent:
    def __init__(
        self,
        control: ControlPlane,
        backend: base.Backend,
        interval: float = 1.0,
        restop_after_s: float = RESTOP_AFTER_S,
        health: HealthCheck | None = None,
    ):
        self.control = control
        self.backend = backend
        # The nodes' health check, if the platform runs one: its verdicts narrow the inventory,
        # and a changed one has it reported at the next step.
        self.health = health
        if health is not None:
            health.changed = self.inventory_changed
        self.interval = interval
        self.restop_after_s = restop_after_s
        self.steps = 0
        self.inventory_due = True
        self.unsent: list[base.LogLine] = []
        self.log_failures = 0
        # Attempts asked to stop, and when to ask again if they still run (monotonic clock).
        self.stopping: dict[int, float] = {}
        # The runtime limit the backend was given for each attempt it runs (at its start, or
        # lowered since); one found running after a restart is given its limit once again.
        self.limits: dict[int, int] = {}

    def inventory_changed(self) -> None:
        self.inventory_due = True

    def run_forever(self, stop: threading.Event) -> None:
        checks = self.start_health_checks(stop) if self.health is not None else None
        while not stop.is_set():
            try:
                self.step()
            except requests.RequestException as error:
                if refused(error):  # the agent's report is at fault, not the network
                    log.error("control plane refused the report, workers keep running: %s", error)
                else:
                    log.warning("control plane unreachable (%s); workers keep running", error)
            except Exception:
                log.exception("agent step failed; the next one retries")
            stop.wait(self.interval)
        if checks is not None and self.health is not None:
            self.health.stop()
            checks.join(timeout=10)

    def step(self) -> None:
        if self.inventory_due or self.steps % INVENTORY_EVERY == 0:
            self.inventory_due = not self.report_inventory()
        self.steps += 1
        statuses = self.backend.status()  # 1
        if not self.ship_logs() and self.log_failures < HOLD_HEARTBEAT_STEPS:  # 2
            return  # ended workers are reported once their last lines are in
        waiting = self.backend.logs_to_resume()
        state = self.heartbeat(statuses, waiting)  # 3
        self.resume_logs(waiting, state)
        self.reconcile(state, statuses)  # 4

    def start_health_checks(self, stop: threading.Event) -> threading.Thread:
        """Check the nodes in a thread of their own: the first inventory lists them, not ready
        until checked, and the thread checks them at once. Never before the first heartbeat:
        a slow check of many nodes would have the cluster taken for silent."""
        assert self.health is not None
        thread = threading.Thread(
            target=self.health.run_forever, args=(stop,), name="health-check", daemon=True
        )
        thread.start()
        return thread

    def heartbeat(
        self, statuses: list[base.WorkerStatus], waiting: Sequence[tuple[int, int]] = ()
    ) -> dict:
        """Report the workers. A report refused for entries it names goes again at once
        without them: a refused report renews nothing, and past the agent timeout the whole
        cluster's work would be declared lost for one broken entry. At most HEARTBEAT_RESENDS
        times: the control plane checks each entry, then the ranks of all, so a report broken
        both ways is refused once for each. A refusal past that is raised: the next step tries
        again, never a loop within this one."""
        sending, resends = statuses, 0
        while True:
            try:
                return self.control.heartbeat(sending, waiting, self.backend.usage_epoch)
            except requests.HTTPError as error:
                broken = refused_entries(error, len(sending))
                if not broken or resends == HEARTBEAT_RESENDS:
                    raise
            for index, why in sorted(broken.items()):
                worker = sending[index]
                log.error("heartbeat entry %d (attempt %d, rank %d, %s) dropped, refused by the "
                          "control plane: %s", index, worker.attempt_id, worker.rank,
                          worker.phase, json.dumps(why))  # fmt: skip
            sending = [s for i, s in enumerate(sending) if i not in broken]
            resends += 1

    def resume_logs(self, waiting: Sequence[tuple[int, int]], state: dict) -> None:
        """Tell the backend where the control plane's copy of each waiting log ends. A log the
        answer leaves out is asked for again at the next step."""
        if not waiting:
            return
        try:
            self.backend.resume_logs(log_resumes(waiting, state))
        except Exception:
            log.exception("where logs resume not taken; asked again at the next step")

    def report_inventory(self) -> bool:
        """Send the nodes; False if that should be tried again at the next step."""
        try:
            nodes = self.backend.inventory()
            if self.health is not None:
                nodes = self.health.apply(nodes)
            self.control.inventory(nodes)
        except Exception as error:
            if refused(error):  # refused now, refused again: wait for the next inventory step
                log.error("control plane refused the inventory: %s", error)
                return True
            log.warning("inventory not reported (%s); trying again next step", error)
            return False
        return True

    def ship_logs(self) -> bool:
        """Send the new lines; False if the control plane could not take them (they are kept
        and sent again at the next step)."""
        try:
            self.unsent.extend(map(cut, self.backend.logs()))
            del self.unsent[:-MAX_BUFFERED_LINES]  # a long outage drops the oldest lines
            for batch in batches(list(self.unsent)):
                try:
                    self.control.logs(batch)
                except requests.HTTPError as error:
                    # A batch the control plane refuses would be refused again: sending it
                    # forever would hold back every heartbeat behind it.
                    if not refused(error):
                        raise
                    log.error("control plane refused %d log lines, dropped: %s", len(batch), error)
                del self.unsent[: len(batch)]
        except Exception as error:
            self.log_failures += 1
            log.warning("log lines not shipped (%s); %d kept", error, len(self.unsent))
            return False
        self.log_failures = 0
        return True

    def reconcile(self, state: dict, statuses: list[base.WorkerStatus]) -> None:
        wanted = {spec["attempt_id"]: spec for spec in state["run"]}
        to_stop = {s["attempt_id"]: s["grace_s"] for s in state["stop"]}
        phases: dict[int, set[str]] = defaultdict(set)
        for status in statuses:
            phases[status.attempt_id].add(status.phase)
        for attempt_id, spec in wanted.items():
            limit = spec.get("max_runtime_s")
            if attempt_id not in phases:
                if self.act("start", self.backend.start, spec_from_dict(spec)) and limit:
                    self.limits[attempt_id] = limit
            elif self.lowered(attempt_id, limit, phases[attempt_id]):
                self.limits[attempt_id] = limit
        for attempt_id, seen in phases.items():
            running = bool(seen & ACTIVE)
            if attempt_id in to_stop or (attempt_id not in wanted and running):
                # Stopped on request, or no longer wanted (it ended elsewhere in its gang, or was
                # given up while this agent was away): stop it, and again if it still runs well
                # past its grace (a pod delete that failed). Its GPUs stay its own until then.
                if running and time.monotonic() >= self.stopping.get(attempt_id, 0):
                    grace = to_stop.get(attempt_id, 10)
                    self.act("stop", self.backend.stop, attempt_id, grace)
                    self.stopping[attempt_id] = time.monotonic() + grace + self.restop_after_s
            elif attempt_id not in wanted and not running:
                # Ended, reported, and its logs are shipped.
                if self.act("forget", self.backend.forget, attempt_id):
                    self.limits.pop(attempt_id, None)
                self.stopping.pop(attempt_id, None)

    def lowered(self, attempt_id: int, limit: int | None, seen: set[str]) -> bool:
        """Give a running attempt the runtime limit its job has now, if it is not the one the
        backend was given (the backend lowers a worker's limit only); whether it was done."""
        if not limit or self.limits.get(attempt_id) == limit or not seen & ACTIVE:
            return False
        return self.act("lower the runtime limit of", self.backend.lower_runtime_limit,
                        attempt_id, limit)  # fmt: skip

    def act(self, what: str, fn, *args) -> bool:
        """One backend action, and whether it was done; its failure is logged and leaves the
        others to be done (the next step sees the same state and tries again)."""
        try:
            fn(*args)
        except Exception:
            log.exception("%s %s failed; the next step tries again", what, args[0])
            return False
        return True
