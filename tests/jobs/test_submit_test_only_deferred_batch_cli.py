"""`submit --test-only` of a batch deferred by its begin, some of whose shards fit now: the
line it prints says no shard would start now (each waits for the begin)."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs.cli import trial_line
from jobs.models import Family
from tests.factories import ClusterFactory, NodeFactory
from tests.jobs.test_submit_test_only import submit_test_only

pytestmark = pytest.mark.django_db


def test_no_shard_of_a_batch_waiting_for_its_begin_is_said_to_start_now(
    alpha, alice, normal_priority
):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_type="A100", gpu_count=2)
    begin = datetime.now(UTC) + timedelta(hours=2)
    answer = submit_test_only(
        alice, family=Family.BATCH_INFERENCE, gpus=1, shards=3, begin=begin.isoformat()
    ).json()
    assert [job["status"] for job in answer["jobs"]][:2] == ["placed", "placed"]

    line = trial_line(answer)

    assert "start now" not in line
