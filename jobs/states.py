"""The job state machine: the one place that says which transitions exist.

    queued -> scheduled -> running -> succeeded | failed | canceled

Preemption and retried infrastructure failures send a scheduled or running job back to queued,
with a new attempt to follow. A job retrying a lost attempt (queued, or its retry scheduled or
running) ends succeeded when that attempt is reported late to have exited 0 (its agent was
away, not its workers: `jobs.actions.late_success`). Terminal states have no way out.
"""

from django.db import models


class State(models.TextChoices):
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


EDGES: dict[str, frozenset[str]] = {
    State.QUEUED: frozenset({State.SCHEDULED, State.CANCELED, State.SUCCEEDED}),
    State.SCHEDULED: frozenset(
        {State.RUNNING, State.QUEUED, State.FAILED, State.CANCELED, State.SUCCEEDED}
    ),
    State.RUNNING: frozenset({State.SUCCEEDED, State.FAILED, State.CANCELED, State.QUEUED}),
    State.SUCCEEDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELED: frozenset(),
}

TERMINAL = frozenset(s for s, out in EDGES.items() if not out)
ACTIVE = frozenset({State.SCHEDULED, State.RUNNING})


def batch_state(shards: dict[str, int]) -> str:
    """A batch's state from its shards' (state: count). While a shard lives: the furthest a
    live shard has got (running, then scheduled, then queued). Once all have ended: succeeded
    when every shard did, failed when any failed, else (some canceled, none failed) canceled."""
    for live in (State.RUNNING, State.SCHEDULED, State.QUEUED):
        if shards.get(live):
            return live
    if set(shards) == {State.SUCCEEDED}:
        return State.SUCCEEDED
    return State.FAILED if shards.get(State.FAILED) else State.CANCELED


class IllegalTransition(Exception):
    """A transition the state machine does not have, or one whose starting state is stale."""

    def __init__(self, job_id: int, source: str, target: str):
        super().__init__(f"job {job_id}: no transition from {source} to {target}")
        self.job_id, self.source, self.target = job_id, source, target


def check(job_id: int, source: str, target: str) -> None:
    """Raise IllegalTransition unless source -> target is an edge of the machine."""
    if target not in EDGES[source]:
        raise IllegalTransition(job_id, source, target)
