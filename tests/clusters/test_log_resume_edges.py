"""Where the stored logs of a restarted agent's workers end, at scale: one heartbeat answers
for up to RESUMES_PER_BEAT workers, in as many queries for many as for one."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters import agents
from clusters.backends import base
from jobs import cycle
from jobs.models import Family
from tests.clusters.test_agent_api import post
from tests.factories import JobFactory, NodeFactory

STAMP = 1_790_000_000.25

pytestmark = pytest.mark.django_db


@pytest.fixture
def wide_gang(east):
    """An 8-worker gang of one GPU each, placed on an 8-GPU node of `east`, every worker with
    a stored, stamped log of three lines."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(family=Family.TRAINING, workers=8, gpus=1)
    cycle.run_cycle()
    attempt = job.attempts.get()
    lines = [base.LogLine(attempt.pk, rank, seq, "stdout", f"l{seq}", STAMP + seq)
             for rank in range(8) for seq in range(3)]  # fmt: skip
    agents.store_logs(east, lines)
    return attempt


def queries_of_a_beat(agent, attempt, ranks) -> int:
    asked = [{"attempt_id": attempt.pk, "rank": rank} for rank in ranks]
    with CaptureQueriesContext(connection) as queries:
        answer = post(agent, "east", "heartbeat", {"workers": [], "resume_logs": asked})
    assert [e["seq"] for e in answer.json()["resume_logs"]] == [2] * len(ranks)
    return len(queries)


def test_a_beat_answers_where_eight_logs_end_in_the_queries_of_one(agent, wide_gang):
    one = queries_of_a_beat(agent, wide_gang, [0])

    assert queries_of_a_beat(agent, wide_gang, range(8)) == one


def test_where_logs_end_is_read_in_three_queries_however_many_are_asked(wide_gang):
    keys = [(wide_gang.pk, rank) for rank in range(8)] + [(wide_gang.pk + 1000, 0)]
    east = wide_gang.cluster

    with CaptureQueriesContext(connection) as queries:
        agents.log_resumes(east, keys)

    assert len(queries) == 3
