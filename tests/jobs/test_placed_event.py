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


def test_a_gangs_placement_names_its_nodes(east):
    for i in range(2):
        NodeFactory(cluster=east, name=f"east-gpu-{i}", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, workers=2, gpus=8)

    cycle.run_cycle()

    assert placed_event(job) == "placed on east-gpu-0, east-gpu-1"


def test_a_large_gangs_placement_names_its_first_nodes_and_counts_the_rest(east):
    for i in range(9):
        NodeFactory(cluster=east, name=f"n{i}", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, workers=9, gpus=8)

    cycle.run_cycle()

    assert placed_event(job) == "placed on n0, n1, n2, n3, n4, n5 and 3 more"
