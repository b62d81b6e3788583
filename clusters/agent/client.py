"""The agent's side of /api/v1/agent/<cluster>/: plain HTTP with the cluster's token."""

import time
from collections.abc import Sequence
from dataclasses import asdict

import requests

from clusters.backends.base import SPEC_FIELDS, LogLine, NodeInventory, WorkerStatus


class ControlPlane:
    def __init__(self, url: str, cluster: str, token: str, timeout: float = 10.0):
        self.base = f"{url.rstrip('/')}/api/v1/agent/{cluster}/"
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Agent {token}"

    def _post(self, what: str, payload: dict) -> dict:
        response = self.session.post(self.base + what + "/", json=payload, timeout=self.timeout)
        if 400 <= response.status_code < 500:
            # The answer names what was refused: keep it in the error, for the agent's log.
            raise requests.HTTPError(
                f"{response.status_code} {response.reason} for {what}: {response.text[:2000]}",
                response=response,
            )
        response.raise_for_status()
        return response.json()

    def inventory(self, nodes: list[NodeInventory]) -> dict:
        """Report the nodes, and the run spec's fields this agent keeps ("spec_fields"), as
        every heartbeat does: the inventory goes first as the agent starts, so an agent
        replacing one of another release is judged by its own from its first report."""
        return self._post(
            "inventory", {"nodes": [asdict(n) for n in nodes], "spec_fields": list(SPEC_FIELDS)}
        )

    def heartbeat(
        self,
        workers: list[WorkerStatus],
        resume_logs: Sequence[tuple[int, int]] = (),
        usage_epoch: str = "",
    ) -> dict:
        """Report the workers; the answer is {"run": [...], "stop": [...]}: in "run", an
        attempt the report named is {"attempt_id": id} alone, a new one its whole spec. With
        `resume_logs`, (attempt, rank) of workers whose log the backend waits to number, the
        answer says where the control plane's copy of each ends, under "resume_logs". The report
        carries this host's time ("sent_at"): the control plane moves the idle times it reports
        onto its own clock; and the backend's `usage_epoch`, the run of counts its GPU-seconds
        belong to; and the run spec's fields this agent keeps ("spec_fields"): the control plane
        gives it no work needing one it would leave out."""
        payload: dict = {
            "workers": [asdict(w) for w in workers],
            "sent_at": time.time(),
            "spec_fields": list(SPEC_FIELDS),
        }
        if usage_epoch:
            payload["usage_epoch"] = usage_epoch
        if resume_logs:
            payload["resume_logs"] = [{"attempt_id": a, "rank": r} for a, r in resume_logs]
        return self._post("heartbeat", payload)

    def logs(self, lines: list[LogLine]) -> dict:
        return self._post("logs", {"lines": [asdict(line) for line in lines]})
