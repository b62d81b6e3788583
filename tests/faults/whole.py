"""What must hold after any crash: no job, attempt or allocation left half-written."""

from collections import defaultdict

from clusters.models import Allocation
from jobs.models import Attempt, Job, JobEvent
from jobs.states import ACTIVE


def assert_whole() -> None:
    """Every scheduled or running job has exactly one live attempt and every other job none;
    live attempts hold allocations and ended ones none; each job's events chain from queued
    to the state it is in."""
    live = defaultdict(int)
    for job_id in Attempt.objects.filter(outcome="").values_list("job_id", flat=True):
        live[job_id] += 1
    for job_id, state in Job.objects.values_list("id", "state"):
        want = 1 if state in ACTIVE else 0
        assert live[job_id] == want, f"job {job_id} is {state} with {live[job_id]} live attempts"
    held = set(Allocation.objects.active().values_list("attempt_id", flat=True).distinct())
    live_attempts = set(Attempt.objects.filter(outcome="").values_list("id", flat=True))
    assert held <= live_attempts, f"ended attempts hold allocations: {held - live_attempts}"
    assert live_attempts <= held, f"live attempts hold nothing: {live_attempts - held}"
    chains = defaultdict(list)
    for job_id, source, target in JobEvent.objects.order_by("id").values_list(
        "job_id", "from_state", "to_state"
    ):
        chains[job_id].append((source, target))
    for job_id, state in Job.objects.values_list("id", "state"):
        steps = chains[job_id]
        for (_, before), (after, _) in zip(steps, steps[1:], strict=False):
            assert before == after, f"job {job_id}: events {steps} do not chain"
        assert (steps[-1][1] if steps else "queued") == state, f"job {job_id}: {steps}, {state}"
