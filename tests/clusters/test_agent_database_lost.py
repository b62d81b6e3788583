"""An agent's report that loses the database partway answers 503, and sent again, as the agent
sends it, leaves what it leaves sent once: each report (a gang's start, what its workers used
and their checkpoint, its end with a code error, a worker lost, its stop once its nodes are
drained, a log batch, an inventory) has its connection ended before each of its writes in turn
(tests/test_api_faults.py's). A report is the backend's whole view, taken in a piece at a time
(the cluster's sign of life, each attempt's start or end, each worker's stamp), each piece whole
or not at all: what a lost one left undone the next one does, nothing twice."""

import re
import time

import pytest
import yaml
from rest_framework.test import APIClient

from clusters.backends import base
from clusters.models import Allocation, Node
from jobs import actions, cycle
from jobs.models import Attempt, Family, Job, JobEvent, LogChunk
from jobs.states import State
from tests.clusters.test_agent_api import report
from tests.factories import JobFactory, NodeFactory
from tests.test_api_faults import cut_short, not_503, writes_of

pytestmark = pytest.mark.django_db(transaction=True)

NODE = re.compile(r"east-[0-9]+")
REPORTED = ["name", "cpu_milli", "memory_mb", "gpu_type", "gpu_count", "gpu_shareable",
            "topology", "features"]  # fmt: skip


class Reports:
    """Each report of east's agent, on a gang of its own: `prepare(name)` gives (what, body)."""

    def __init__(self, east):
        self.east, self.token = east, east.rotate_token()

    def send(self, call):
        what, body = call
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Agent {self.token}")
        return client.post(f"/api/v1/agent/east/{what}/", body, format="json")

    def placed_gang(self) -> Attempt:
        """A 2-worker gang placed on two nodes of its own."""
        # Jobs earlier reports sent back to the queue would be placed first.
        actions.cancel_jobs(Job.objects.filter(state=State.QUEUED), "making room")
        count = Node.objects.count()
        for i in range(2):
            NodeFactory(cluster=self.east, name=f"east-{count + i}", gpu_count=8)
        job = JobFactory(family=Family.TRAINING, workers=2, gpus=8)
        cycle.run_cycle()
        return job.attempts.get()

    def prepare(self, name: str):
        if name == "inventory":  # every node as it is, and one more
            Node.objects.filter(name="east-new").delete()
            nodes = Node.objects.filter(cluster=self.east).values(*REPORTED)
            nodes = [{**node, "ready": True, "not_ready": ""} for node in nodes]
            new = {**nodes[0], "name": "east-new"}
            return "inventory", {"nodes": [*nodes, new], "spec_fields": list(base.SPEC_FIELDS)}
        attempt = self.placed_gang()
        running = report(attempt, base.RUNNING, base.RUNNING)
        if name == "start":
            return "heartbeat", {"workers": running}
        if name == "logs":
            lines = [{"attempt_id": attempt.pk, "rank": rank, "seq": 0, "stream": "stdout",
                      "text": "step"} for rank in (0, 1)]  # fmt: skip
            return "logs", {"lines": lines}
        self.send(("heartbeat", {"workers": running}))
        if name == "end":
            ended = report(attempt, base.EXITED, base.EXITED, codes=[0, 1])
        elif name == "lost":  # an infrastructure failure: retried
            ended = report(attempt, base.RUNNING, base.LOST)
        elif name == "drained":  # asked to stop, requeued
            actions.drain(list(attempt.allocations.values_list("node_id", flat=True)), "root")
            ended = report(attempt, base.STOPPED, base.STOPPED)
        else:  # "usage": what the workers used, and their checkpoint
            now = time.time()
            ended = [{**worker, "cpu_seconds": 12.5, "memory_peak_mb": 900,
                      "gpu_busy_seconds": 30.0, "checkpoint_at": now - 10, "started_at": now - 60}
                     for worker in running]  # fmt: skip
            return "heartbeat", {"workers": ended, "usage_epoch": "e1", "sent_at": now}
        return "heartbeat", {"workers": ended}

    def left(self, call) -> tuple:
        """What a report leaves of what it is about: the gang's job, attempt, events,
        allocations and log lines, or the cluster's nodes; without ids, times and the names of
        the gang's nodes (each gang has its own)."""
        what, body = call
        if what == "inventory":
            return tuple(Node.objects.filter(cluster=self.east).order_by("name").values_list(
                *REPORTED, "healthy", "not_ready_reason", "schedulable"))  # fmt: skip
        (item,) = {entry["attempt_id"] for entry in body.get("workers", body.get("lines"))}
        job = Attempt.objects.get(pk=item).job_id
        attempts = Attempt.objects.filter(job_id=job)
        allocations = Allocation.objects.filter(attempt__job_id=job).order_by("pk")
        return (
            list(Job.objects.filter(pk=job).values_list("state", "held", "pending_reason")),
            [(a.outcome, a.exit_code, a.reason, a.started_at is None, a.ended_at is None,
              a.worker_ran_at is None, a.last_checkpoint_at is None, a.cpu_seconds,
              a.memory_peak_mb, a.gpu_busy_seconds) for a in attempts],
            [(event.from_state, event.to_state, NODE.sub("a node", event.reason))
             for event in JobEvent.objects.filter(job_id=job).order_by("pk")],
            [(a.worker, a.active, a.released is None) for a in allocations],
            list(LogChunk.objects.filter(attempt__job_id=job).order_by("pk").values_list(
                "worker", "seq", "text")),
        )  # fmt: skip


def test_a_report_cut_short_at_any_write_and_sent_again_leaves_what_it_leaves_sent_once(east):
    reports = Reports(east)
    found = {}
    for name in ("start", "usage", "end", "lost", "drained", "logs", "inventory"):
        call = reports.prepare(name)
        writes = writes_of(reports.send, call)
        once = reports.left(call)
        for at in range(1, writes + 1):
            call = reports.prepare(name)
            answer, _, cut = cut_short(reports.send, call, at)
            again = reports.send(call)
            said = not_503(answer) if cut else "sent fewer writes than in the count"
            if said or again.status_code != 200 or reports.left(call) != once:
                found[f"{name} at write {at}"] = said or (
                    f"sent again: {again.status_code}, left {reports.left(call)}, once {once}"
                )

    assert not found, yaml.safe_dump(found, width=200)
