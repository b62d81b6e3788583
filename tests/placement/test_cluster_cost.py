"""Cluster placement costs (Slurm's node Weight): work starts on the cheapest cluster that can
hold it, whatever fits better elsewhere, and bursts to a dearer one only when the cheap one is
full; a gang still takes its fewest nodes first."""

from jobs.placement import CLUSTER_COST_STEP, Policy, place
from tests.placement.builders import (
    j_batch,
    j_training,
    n4_a100_nodes,
    n8_a100_nodes,
    running_on,
    snapshot,
)

COSTLY = Policy(cluster_costs={"cloud": CLUSTER_COST_STEP})


def clusters_of(outcome) -> set[str]:
    return {w.cluster for w in outcome.workers}


def test_a_task_goes_to_the_cheap_cluster_though_a_dearer_one_fits_it_better():
    (cloud,) = n8_a100_nodes(1, cluster="cloud")
    cloud, held = running_on(cloud, "held", 7)  # one GPU left: the tightest fit
    own = n8_a100_nodes(1, cluster="own")
    queue = (j_batch("task", gpus=1),)

    assert clusters_of(place(snapshot((cloud, *own), queue, running=(held,))).outcomes[0]) == {
        "cloud"
    }
    costly = place(snapshot((cloud, *own), queue, running=(held,), policy=COSTLY))
    assert clusters_of(costly.outcomes[0]) == {"own"}


def test_work_bursts_to_the_dearer_cluster_once_the_cheap_one_is_full():
    nodes = n8_a100_nodes(1, cluster="own") + n8_a100_nodes(1, cluster="cloud")
    queue = tuple(j_batch(f"s{i}", gpus=1) for i in range(12))
    decision = place(snapshot(nodes, queue, policy=COSTLY))

    placed = [o.workers[0].cluster for o in decision.outcomes if o.status == "placed"]
    assert placed == ["own"] * 8 + ["cloud"] * 4


def test_a_multi_node_gang_takes_the_cheap_cluster_among_plans_of_as_many_nodes():
    # On the cloud its two nodes share a rack; at home they do not: the cost still decides.
    cloud = n8_a100_nodes(2, cluster="cloud", topology=("rack-1",))
    own = n8_a100_nodes(2, cluster="own")
    gang = j_training("gang", workers=2, gpus=8)

    assert clusters_of(place(snapshot(cloud + own, (gang,))).outcomes[0]) == {"cloud"}
    costly = place(snapshot(cloud + own, (gang,), policy=COSTLY))
    assert clusters_of(costly.outcomes[0]) == {"own"}


def test_a_gang_that_fits_one_dearer_node_is_not_split_over_cheap_ones():
    cloud = n8_a100_nodes(1, cluster="cloud")
    own = n4_a100_nodes(2, cluster="own")
    gang = j_training("gang", workers=2, gpus=4)

    outcome = place(snapshot(cloud + own, (gang,), policy=COSTLY)).outcomes[0]
    assert clusters_of(outcome) == {"cloud"} and len({w.node_id for w in outcome.workers}) == 1


def test_costs_of_steps_rank_the_clusters_in_order():
    nodes = (
        n8_a100_nodes(1, cluster="c")
        + n8_a100_nodes(1, cluster="b")
        + n8_a100_nodes(1, cluster="a")
    )
    policy = Policy(cluster_costs={"b": CLUSTER_COST_STEP, "c": 2 * CLUSTER_COST_STEP})
    queue = tuple(j_training(f"g{i}", gpus=8) for i in range(3))
    decision = place(snapshot(nodes, queue, policy=policy))

    assert [o.workers[0].cluster for o in decision.outcomes] == ["a", "b", "c"]
