"""A training gang that asks for a topology domain (``QueuedJob.topology``, Kueue's required
topology, Slurm's --switches): all its nodes share one value of that label, or it waits."""

from __future__ import annotations

import dataclasses

from jobs.placement import PENDING, PLACED, RESERVED, Policy, place
from tests.placement.builders import NOW, j_training, nodes, running_on, snapshot

H = 3600.0


def rack(name: str, count: int, block: str = "b1"):
    """``count`` free 8-GPU nodes of one rack."""
    return nodes(count, 8, "a100", prefix=f"{name}-", topology=(f"rack={name}", f"block={block}"))


def gang(workers=2, topology="rack", **kw):
    return j_training("g", workers=workers, gpus=8, topology=topology, max_runtime=H, **kw)


def busy(node, ends_in=H):
    return running_on(node, f"busy-{node.id}", 8, expected_end=NOW + ends_in)


def decided(queued, inventory, running=()):
    return place(snapshot(inventory, queued, running)).by_job()


def test_its_nodes_share_a_rack():
    inventory = [*rack("r1", 1), *rack("r2", 2)]

    out = decided([gang()], inventory)["g"]

    assert out.status == PLACED
    assert {w.node_id for w in out.workers} == {"r2-0", "r2-1"}


def test_with_no_rack_free_enough_it_holds_one_rack_where_any_gang_would_start_across():
    r1, (r2_free, r2_busy) = rack("r1", 1), rack("r2", 2)
    r2_busy, running = busy(r2_busy)
    inventory = [*r1, r2_free, r2_busy]

    required = decided([gang()], inventory, [running])["g"]
    anywhere = decided([gang(topology="")], inventory, [running])["g"]

    assert anywhere.status == PLACED
    assert {w.node_id for w in anywhere.workers} == {"r1-0", "r2-0"}
    assert required.status == RESERVED
    assert set(required.reserved_nodes) == {"r2-0", "r2-1"}


def test_the_next_such_gang_says_it_waits_for_room_in_one_rack():
    r1, (r2_free, r2_busy) = rack("r1", 1), rack("r2", 2)
    r2_busy, running = busy(r2_busy)
    second = dataclasses.replace(gang(), id="second")

    out = decided([gang(), second], [*r1, r2_free, r2_busy], [running])

    assert out["g"].status == RESERVED
    assert (out["second"].status, out["second"].reason) == (PENDING, "topology")


def test_a_gang_no_rack_could_ever_hold_never_waits_for_room():
    inventory = [*rack("r1", 1), *rack("r2", 1)]

    out = decided([gang()], inventory)["g"]
    anywhere = decided([gang(topology="")], inventory)["g"]

    assert (out.status, out.reason) == (PENDING, "topology_too_small")
    assert anywhere.status == PLACED


def test_a_gang_asking_for_a_wider_domain_starts_across_racks_of_one_block():
    inventory = [*rack("r1", 1, block="b1"), *rack("r2", 1, block="b1"), *rack("r3", 1, "b2")]

    out = decided([gang(topology="block")], inventory)["g"]

    assert out.status == PLACED
    assert {w.node_id for w in out.workers} == {"r1-0", "r2-0"}


def test_nodes_without_the_label_take_no_gang_that_asks_for_it():
    unlabelled = nodes(2, 8, "a100", prefix="plain-")

    out = decided([gang()], unlabelled)["g"]

    assert (out.status, out.reason) == (PENDING, "topology_too_small")


def test_a_gang_that_fits_on_one_node_needs_no_label():
    unlabelled = nodes(1, 8, "a100", prefix="plain-")

    out = decided([j_training("g", workers=2, gpus=4, topology="rack")], unlabelled)["g"]

    assert out.status == PLACED


def test_a_gang_that_waits_for_its_rack_does_not_stop_a_gang_of_its_shape_that_may_cross():
    r1, (r2_free, r2_busy) = rack("r1", 1), rack("r2", 2)
    r2_busy, running = busy(r2_busy)
    free_to_cross = dataclasses.replace(gang(topology=""), id="cross")

    out = decided([gang(), free_to_cross], [*r1, r2_free, r2_busy], [running])

    assert out["g"].status != PLACED
    assert out["cross"].status == PLACED


def test_its_estimated_start_is_when_one_domain_has_room_not_its_whole_group():
    # At 1 h one node of each rack is free (16 GPUs in the group, 8 in each rack); rack r2
    # is whole at 2 h.
    r1, r2 = list(rack("r1", 2)), list(rack("r2", 2))
    r1[0], long = busy(r1[0], ends_in=3 * H)
    r2[0], soon = busy(r2[0], ends_in=H)
    r2[1], later = busy(r2[1], ends_in=2 * H)
    inventory = [*r1, *r2]
    waits = Policy(backfill=False)

    def estimate(topology):
        snap = snapshot(inventory, [gang(topology=topology)], [long, soon, later], policy=waits)
        out = place(snap).by_job()["g"]
        assert out.status == PENDING
        return out.estimated_start

    assert estimate("rack") == NOW + 2 * H
    assert estimate("") == NOW + H
