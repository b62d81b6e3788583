"""An agent's report sent twice at once (a retry while the first is still taken in, or two
agents of one cluster for a while) is taken in once: each held at its first write until the
other reaches one (tests/test_api_concurrency.py's `at_once`)."""

import pytest
from rest_framework.test import APIClient

from clusters.backends import base
from clusters.models import Node
from jobs.models import Attempt, JobEvent, LogChunk
from jobs.states import State
from tests.clusters.test_agent_api import report
from tests.test_api_concurrency import at_once

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(east):
    return east.rotate_token()


def posted(token: str):
    """Sends (what, body) to east's agent API as its agent."""

    def send(call):
        what, body = call
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Agent {token}")
        return client.post(f"/api/v1/agent/east/{what}/", body, format="json")

    return send


def test_a_gangs_start_reported_twice_at_once_starts_it_once(gang, token):
    attempt = gang.attempts.get()
    beat = ("heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)})

    answers = at_once(beat, beat, send=posted(token))

    assert [a.status_code for a in answers] == [200, 200]
    assert JobEvent.objects.filter(job=gang, to_state=State.RUNNING).count() == 1


def test_a_gangs_end_reported_twice_at_once_ends_it_once(gang, token):
    attempt = gang.attempts.get()
    posted(token)(("heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)}))
    ended = ("heartbeat", {"workers": report(attempt, base.EXITED, base.EXITED, codes=[0, 0])})

    answers = at_once(ended, ended, send=posted(token))

    assert [a.status_code for a in answers] == [200, 200]
    gang.refresh_from_db()
    assert gang.state == State.SUCCEEDED
    assert JobEvent.objects.filter(job=gang, to_state=State.SUCCEEDED).count() == 1
    assert Attempt.objects.get(pk=attempt.pk).outcome == Attempt.Outcome.SUCCEEDED


def test_a_log_batch_sent_twice_at_once_is_stored_once(gang, token):
    attempt = gang.attempts.get()
    lines = [{"attempt_id": attempt.pk, "rank": 0, "seq": seq, "stream": "stdout",
              "text": f"step {seq}"} for seq in range(3)]  # fmt: skip

    answers = at_once(("logs", {"lines": lines}), ("logs", {"lines": lines}), send=posted(token))

    assert [a.status_code for a in answers] == [200, 200]
    assert LogChunk.objects.filter(attempt=attempt).count() == 3


def test_an_inventory_sent_twice_at_once_makes_each_node_once(east, token):
    node = {"name": "east-new", "cpu_milli": 96_000, "memory_mb": 1_024_000, "gpu_type": "A100",
            "gpu_count": 8, "gpu_shareable": False, "topology": {}, "ready": True,
            "features": [], "not_ready": ""}  # fmt: skip
    inventory = ("inventory", {"nodes": [node], "spec_fields": list(base.SPEC_FIELDS)})

    answers = at_once(inventory, inventory, send=posted(token))

    assert [a.status_code for a in answers] == [200, 200]
    assert Node.objects.filter(cluster=east, name="east-new").count() == 1
