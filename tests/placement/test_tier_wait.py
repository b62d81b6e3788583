"""A job queued past ``Policy.tier_wait_limit_hours`` also comes ahead with the highest tier: it
goes first for free capacity, but there neither evicts nor holds nodes back; at its own place it
keeps its own tier's rights."""

from jobs.placement import Policy, place
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot

HOUR = 3600


def test_a_starved_job_goes_first_but_does_not_evict():
    (a,) = n8_a100_nodes(1)
    a, mid = running_on(a, "mid", 8, tier=3, preemptible=True, last_checkpoint=NOW - 60)
    starved = j_training("starved", gpus=8, tier=1, submit_time=NOW - 48 * HOUR)
    top = j_training("top", gpus=8, tier=5, may_preempt=False)

    decision = place(snapshot((a,), (starved, top), running=(mid,)))

    assert [o.job_id for o in decision.outcomes][0] == "starved"
    assert decision.by_job()["starved"].status == "pending"
    assert decision.preempted == ()


def _with_lower_tier_job_queued(hours: float, top_gpus: int = 8):
    """A tier-0 8-GPU job queued ``hours`` ago and a new tier-5 one, on two busy nodes (4 GPUs
    free on one)."""
    a, b = n8_a100_nodes(2)
    a, first = running_on(a, "first", 8, expected_end=NOW + HOUR)
    b, second = running_on(b, "second", 4, expected_end=NOW + 2 * HOUR)
    low = j_training("low", gpus=8, tier=0, submit_time=NOW - hours * HOUR)
    top = j_training("top", gpus=top_gpus, tier=5, submit_time=NOW - 60)
    return place(snapshot((a, b), (low, top), running=(first, second)))


def test_a_starved_job_gets_no_reservation_the_next_job_does():
    decision = _with_lower_tier_job_queued(30)

    assert [o.job_id for o in decision.outcomes][0] == "low"
    assert decision.by_job()["low"].status == "pending"
    assert decision.by_job()["top"].status == "reserved"


def test_a_starved_job_still_waiting_reserves_at_its_own_place():
    decision = _with_lower_tier_job_queued(30, top_gpus=4)

    assert decision.by_job()["top"].status == "placed"
    assert decision.by_job()["low"].status == "reserved"
    assert [o.job_id for o in decision.outcomes] == ["low", "top"]


def test_below_the_limit_the_lower_tier_job_keeps_its_place():
    decision = _with_lower_tier_job_queued(20)

    assert [o.job_id for o in decision.outcomes][0] == "top"
    assert decision.by_job()["top"].status == "reserved"


def test_a_top_tier_job_waiting_long_still_reserves():
    (a,) = n8_a100_nodes(1)
    a, first = running_on(a, "first", 8, expected_end=NOW + HOUR)
    old = j_training("old", gpus=8, tier=5, submit_time=NOW - 48 * HOUR)

    decision = place(snapshot((a,), (old,), running=(first,), policy=Policy()))

    assert decision.by_job()["old"].status == "reserved"
