"""Long queues. ``Policy.queue_depth``: a cycle stops once that many jobs, in queue order, have
had to wait; the rest wait as ``beyond_queue_depth`` without an estimate (placements do not
count). A waiting job's answer is reused for an equal request only until something changes."""

from jobs.placement import Policy, place
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot

HOUR = 3600


def _queue(count: int):
    # Older first: aging puts them first in the tenant's queue.
    return [j_training(f"j{i}", gpus=1, submit_time=NOW - (count - i) * HOUR) for i in range(count)]


def _busy_node(free_gpus: int):
    (a,) = n8_a100_nodes(1)
    a, busy = running_on(a, "busy", 8 - free_gpus, expected_end=NOW + HOUR)
    return a, busy


def test_the_cycle_stops_after_depth_jobs_have_had_to_wait():
    a, busy = _busy_node(free_gpus=0)
    queue = _queue(5)

    decision = place(snapshot((a,), queue, running=(busy,), policy=Policy(queue_depth=3)))

    reasons = [o.reason for o in decision.outcomes]
    assert "beyond_queue_depth" not in reasons[:3]
    assert reasons[3:] == ["beyond_queue_depth"] * 2
    assert decision.outcomes[3].estimated_start is None
    assert len(decision.outcomes) == 5


def test_placements_do_not_count_toward_the_depth():
    decision = place(snapshot(n8_a100_nodes(1), _queue(6), policy=Policy(queue_depth=1)))

    assert all(o.status == "placed" for o in decision.outcomes)


def test_jobs_after_the_depth_are_not_placed_even_if_they_fit():
    a, busy = _busy_node(free_gpus=1)
    big = [j_training(f"big{i}", gpus=4, submit_time=NOW - 10 * HOUR) for i in range(2)]
    # Short enough to backfill before the reservation for the first big job starts.
    small = j_training("small", gpus=1, submit_time=NOW, max_runtime=600)
    queue = (*big, small)

    def decide(depth):
        policy = Policy(queue_depth=depth, size_priority_per_doubling=0)
        return place(snapshot((a,), queue, running=(busy,), policy=policy)).by_job()["small"]

    assert decide(2).reason == "beyond_queue_depth"
    assert decide(3).status == "placed"


def test_without_a_depth_every_job_is_decided():
    a, busy = _busy_node(free_gpus=0)
    decision = place(snapshot((a,), _queue(600), running=(busy,), policy=Policy(queue_depth=None)))

    assert "beyond_queue_depth" not in {o.reason for o in decision.outcomes}


def test_an_equal_request_after_a_placement_is_decided_afresh():
    # j1 holds node a from when "ra" ends; s backfills there meanwhile; j2 and j3 ask what j1
    # asks, but s took two of the GPUs that j2 counted on.
    a, b = n8_a100_nodes(2)
    a, ra = running_on(a, "ra", 4, expected_end=NOW + HOUR)
    b, rb = running_on(b, "rb", 8, expected_end=NOW + 3 * HOUR)
    old = [
        j_training(f"j{i}", gpus=8, submit_time=NOW - h * HOUR) for i, h in enumerate((1000, 500))
    ]
    s = j_training("s", gpus=2, max_runtime=600)
    j3 = j_training("j3", gpus=8, submit_time=NOW - 300 * HOUR)

    decision = place(snapshot((a, b), (*old, s, j3), running=(ra, rb)))

    assert [o.job_id for o in decision.outcomes] == ["j0", "j1", "s", "j3"]
    by_job = decision.by_job()
    assert by_job["j0"].status == "reserved" and by_job["s"].status == "placed"
    assert by_job["j1"].estimated_start == NOW + HOUR
    assert by_job["j3"].estimated_start == NOW + 3 * HOUR
