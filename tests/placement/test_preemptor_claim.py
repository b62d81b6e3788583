"""A job that evicted work for itself keeps the room it made: it is decided before the queue
until it starts, so nobody else takes or reserves its victims' nodes and it evicts nobody more."""

from jobs.placement import place
from tests.placement.builders import NOW, j_training, n8_a100_nodes, running_on, snapshot


def _two_busy_nodes(victim_gone: bool):
    a, b = n8_a100_nodes(2)
    a, victim = running_on(a, "victim", 8, preemptible=True, stopping=True, expected_end=NOW + 60)
    b, other = running_on(b, "other", 8, preemptible=True, last_checkpoint=NOW - 600)
    if victim_gone:
        return (n8_a100_nodes(1)[0], b), (other,)
    return (a, b), (victim, other)


def _queue(preempting: bool):
    # A higher class that may not evict anybody, and the job whose eviction is under way.
    higher = j_training("higher", gpus=8, tier=5, may_preempt=False, max_runtime=86_400.0)
    preemptor = j_training("preemptor", gpus=8, tier=3, max_runtime=86_400.0,
                           preempting=preempting)  # fmt: skip
    return (higher, preemptor)


def test_while_its_victim_leaves_a_preemptor_reserves_the_room_and_evicts_nobody_more():
    nodes, running = _two_busy_nodes(victim_gone=False)

    decision = place(snapshot(nodes, _queue(preempting=True), running=running))

    outcomes = decision.by_job()
    assert decision.preempted == ()
    assert outcomes["preemptor"].status == "reserved"
    assert outcomes["higher"].status == "pending"


def test_without_the_claim_a_higher_class_reserves_the_room_and_a_second_job_is_evicted():
    nodes, running = _two_busy_nodes(victim_gone=False)

    decision = place(snapshot(nodes, _queue(preempting=False), running=running))

    assert decision.by_job()["higher"].status == "reserved"
    assert decision.preempted == ("other",)


def test_once_its_victim_is_gone_the_preemptor_starts_there_before_a_higher_class():
    nodes, running = _two_busy_nodes(victim_gone=True)

    decision = place(snapshot(nodes, _queue(preempting=True), running=running))

    outcomes = decision.by_job()
    assert outcomes["preemptor"].status == "placed"
    assert outcomes["preemptor"].workers[0].node_id == nodes[0].id
    assert outcomes["higher"].status != "placed"
    assert decision.preempted == ()


def _against_a_class_that_may_preempt(preemptible: bool):
    higher = j_training("higher", gpus=8, tier=5, max_runtime=86_400.0)
    preemptor = j_training("preemptor", gpus=8, tier=3, max_runtime=86_400.0,
                           preempting=True, preemptible=preemptible)  # fmt: skip
    return (higher, preemptor)


def test_a_preemptible_preemptor_leaves_the_room_to_a_higher_class_that_would_evict_it():
    # Started on its claim, it would be evicted at once by the class above it: that class
    # takes the room, as Kubernetes lets a higher priority take a nominated node.
    nodes, running = _two_busy_nodes(victim_gone=True)
    queue = _against_a_class_that_may_preempt(preemptible=True)

    decision = place(snapshot(nodes, queue, running=running))

    outcomes = decision.by_job()
    assert outcomes["higher"].status == "placed"
    assert outcomes["higher"].workers[0].node_id == nodes[0].id
    assert outcomes["preemptor"].status != "placed"


def test_a_preemptor_that_is_not_preemptible_keeps_its_room_against_any_class():
    nodes, running = _two_busy_nodes(victim_gone=True)
    queue = _against_a_class_that_may_preempt(preemptible=False)

    decision = place(snapshot(nodes, queue, running=running))

    outcomes = decision.by_job()
    assert outcomes["preemptor"].status == "placed"
    assert outcomes["preemptor"].workers[0].node_id == nodes[0].id


def test_a_preemptible_preemptor_keeps_its_room_from_classes_between_it_and_one_that_may_evict_it():
    # The class that may evict it cannot use the room (no H100 here): the preemptor is decided
    # right after that class, before the class between that may not preempt.
    nodes, running = _two_busy_nodes(victim_gone=True)
    h100_only = j_training("h100-only", gpus=8, tier=5, gpu_types=("h100",))
    middle = j_training("middle", gpus=8, tier=4, may_preempt=False, max_runtime=86_400.0)
    preemptor = j_training("preemptor", gpus=8, tier=3, max_runtime=86_400.0,
                           preempting=True, preemptible=True)  # fmt: skip

    decision = place(snapshot(nodes, (h100_only, middle, preemptor), running=running))

    assert decision.by_job()["preemptor"].status == "placed"
    assert decision.by_job()["middle"].status != "placed"
    assert decision.preempted == ()
