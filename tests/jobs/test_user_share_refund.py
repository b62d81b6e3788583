"""An eviction gives a user back, in the tenant's fair share between its users, the GPUs the
snapshot counted for the evicted job's workers: a CPU-only worker counts an eighth of a GPU on
both sides, however many of the job's workers share a node."""

import time

import pytest

from jobs import cycle, snapshot
from jobs.models import Family
from jobs.placement.ordering import running_gpus
from tests.factories import ClusterFactory, JobFactory, NodeFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_cpu_node():
    """A CPU-only node with room for a gang of four CPU-only workers."""
    NodeFactory(cluster=ClusterFactory(), gpu_type="", gpu_count=0)


def test_an_evicted_cpu_only_gang_on_one_node_gives_back_what_its_user_was_charged(
    one_cpu_node, alpha, alice
):
    JobFactory(tenant=alpha, owner=alice, family=Family.BATCH_INFERENCE, workers=4, gpus=0,
               cpu_milli=1000)  # fmt: skip
    cycle.run_cycle()

    loaded = snapshot.load(time.time()).snapshot
    (gang,) = loaded.running
    charged = dict(loaded.tenants[0].user_use)[str(alice.pk)]

    assert charged == pytest.approx(4 * 0.125)
    assert running_gpus(gang) == pytest.approx(charged)


def test_an_evicted_gpu_gang_on_one_node_gives_back_what_its_user_was_charged(alpha, alice):
    NodeFactory(cluster=ClusterFactory(), gpu_type="A100", gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, workers=4, gpus=2, cpu_milli=1000)
    cycle.run_cycle()

    loaded = snapshot.load(time.time()).snapshot
    (gang,) = loaded.running

    assert running_gpus(gang) == pytest.approx(dict(loaded.tenants[0].user_use)[str(alice.pk)])


def cpu_node(cores: int) -> None:
    NodeFactory(cluster=ClusterFactory(), gpu_type="", gpu_count=0, cpu_milli=1000 * cores)


def test_a_user_whose_cpu_gang_a_cycle_evicts_goes_before_a_teammate_holding_more(
    alpha, alice, bob, gamma, charlie
):
    low = PriorityClassFactory(name="low", value=0)
    urgent = PriorityClassFactory(name="urgent", value=10, may_preempt=True)
    one_core = {"tenant": alpha, "family": Family.BATCH_INFERENCE, "gpus": 0, "cpu_milli": 1000,
                "memory_mb": 1000, "priority_class": low}  # fmt: skip
    cpu_node(8)
    alices_gang = JobFactory(owner=alice, workers=8, preemptible=True, **one_core)
    cycle.run_cycle()  # Alice's eight CPU workers fill the first node: 8 x 1/8 GPU
    cpu_node(4)
    JobFactory(owner=bob, workers=4, **one_core)
    cycle.run_cycle()  # Bob's four fill the second: 4 x 1/8 GPU
    cpu_node(1)  # one core left, for one of the two jobs below
    alices_next = JobFactory(owner=alice, **one_core)
    bobs_next = JobFactory(owner=bob, **one_core)
    JobFactory(tenant=gamma, owner=charlie, gpus=0, cpu_milli=8000, memory_mb=8000,
               priority_class=urgent)  # fmt: skip

    result = cycle.run_cycle()

    # Alice's gang is evicted: she holds nothing, Bob half a GPU, so her job, the earlier,
    # takes the core.
    assert alices_gang.pk in result.preempted
    assert {alices_next.pk, bobs_next.pk} & set(result.placed) == {alices_next.pk}
