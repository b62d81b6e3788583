"""A waiting job's answer is reused for the next equal request: copied for that job, and only
where the request's own end puts it on the same side of each reservation."""

from jobs.placement import PENDING, Outcome, Policy, place
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot

HOUR = 3600


def test_it_copies_an_outcome_for_another_job():
    known = Outcome("j1", PENDING, "insufficient_gpus", "no room", estimated_start=NOW + HOUR)
    want = Outcome("j2", PENDING, "insufficient_gpus", "no room", estimated_start=NOW + HOUR)

    copy = known.for_job("j2")

    assert copy == want
    assert hash(copy) == hash(want)
    assert known.job_id == "j1"


def test_equal_requests_each_weigh_their_own_end_against_the_reservation():
    (a,) = n8_a100_nodes(1)
    a, busy = running_on(a, "busy", 6, expected_end=NOW + HOUR)
    # The oldest job takes all 8 GPUs: it reserves the node from when "busy" ends.
    head = j_training("head", gpus=8, submit_time=NOW - 10 * HOUR, max_runtime=HOUR)
    # Equal requests in turn: the long ones would still run then, the short ones end before.
    small = [
        j_training(f"s{i}", gpus=1, submit_time=NOW - (9 - i) * HOUR, max_runtime=limit)
        for i, limit in enumerate([10 * HOUR, 600, 10 * HOUR, 600, 10 * HOUR])
    ]
    policy = Policy(size_priority_per_doubling=0)

    outcomes = place(snapshot((a,), (head, *small), running=(busy,), policy=policy)).by_job()

    assert outcomes["head"].status == "reserved"
    assert [outcomes[j.id].status for j in small] == [
        "pending",
        "placed",
        "pending",
        "placed",
        "pending",
    ]
    # Free GPUs it may not use: the ones held for "head" (the short jobs take the rest).
    assert outcomes["s0"].reason == "waiting_for_reservation"
