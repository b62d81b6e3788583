"""The event of a job's placement names its nodes as users know them (the nodes list, the job
page's Nodes column), not by their ids."""

import pytest

from jobs import cycle
from jobs.models import Family, JobEvent
from jobs.states import State
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


def placed_event(job) -> str:
    return JobEvent.objects.get(job=job, to_state=State.SCHEDULED).reason


@pytest.mark.parametrize(
    ("nodes", "said"),
    [
        (2, "placed on n0, n1"),
        (9, "placed on n0, n1, n2, n3, n4, n5 and 3 more"),  # the first six of a larger gang's
    ],
)
def test_a_gangs_placement_names_its_nodes(east, nodes, said):
    for i in range(nodes):
        NodeFactory(cluster=east, name=f"n{i}", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, workers=nodes, gpus=8)

    cycle.run_cycle()

    assert placed_event(job) == said
