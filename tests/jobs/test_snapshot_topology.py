"""Nodes' topology labels reach the placement core most specific first, whatever their keys:
the key with the most distinct values over the nodes leads (the database keeps no order of an
agent's mapping), so a gang shares the tightest domain it can."""

import time

import pytest

from clusters.models import Allocation
from jobs import cycle, snapshot
from jobs.models import Family
from tests.factories import ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db

# Two racks in one block; a key named before "rack" that is the broader domain.
RACKS = {"n1": ("r1", "b1"), "n2": ("r2", "b1"), "n3": ("r2", "b1"), "n4": ("r3", "b2")}


@pytest.fixture
def nodes():
    cluster = ClusterFactory()
    for name, (rack, block) in RACKS.items():
        NodeFactory(cluster=cluster, name=name, topology={"block": block, "rack": rack})


@pytest.mark.usefixtures("nodes")
def test_the_snapshot_gives_the_rack_before_the_block():
    loaded = snapshot.load(time.time())

    by_name = {node.name: node.topology for node in loaded.snapshot.nodes}
    assert by_name["n1"] == ("rack=r1", "block=b1")


@pytest.mark.usefixtures("nodes")
def test_a_gang_of_two_nodes_shares_a_rack_not_only_a_block():
    gang = JobFactory(family=Family.TRAINING, workers=2, gpus=8)

    assert cycle.run_cycle().placed == [gang.pk]

    used = Allocation.objects.filter(attempt__job=gang).values_list("node__name", flat=True)
    assert sorted(set(used)) == ["n2", "n3"]
