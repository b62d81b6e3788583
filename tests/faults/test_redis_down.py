"""Redis down: it holds no state of record, so the users' API and the agents' API go on.

Only what Redis carries pauses: live updates (the portal polls the API instead), early kicks
(beat's next tick places the jobs), shared rate counters (the limits fail open, the tenant log
rate counts per process). Every Redis client here points at a closed local port, so each Redis
call really fails; transaction=True so the after-commit hooks run inside the request.
"""

import logging

import pytest
from rest_framework.test import APIClient

from jobs import cycle, events
from jobs.models import Job, LogChunk
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db(transaction=True)

DOWN = "redis://127.0.0.1:1/0"  # nothing listens on port 1
SPEC = {
    "tenant": "alpha", "name": "resnet", "family": "training", "image": "pytorch:2",
    "command": ["python", "train.py"], "cpu_milli": 8000, "memory_mb": 32_000, "gpus": 4,
    "workers": 1, "max_runtime_s": 3600,
}  # fmt: skip


@pytest.fixture(autouse=True)
def redis_down(settings, monkeypatch):
    settings.REDIS_URL = DOWN  # the scheduler's kick
    settings.CACHES = {
        **settings.CACHES,
        "throttle": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": DOWN},
    }
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                    "CONFIG": {"hosts": [DOWN]}}
    }  # fmt: skip
    monkeypatch.setattr(events, "_warned_at", {})  # no warning left over from another test


@pytest.fixture
def alice_client(alice):
    PriorityClassFactory(name="normal", value=0)
    client = APIClient()
    client.force_authenticate(alice)
    return client


@pytest.fixture
def attempt(east):
    """The one attempt of a 1-worker job placed on `east`."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    return job.attempts.get()


def test_a_submitted_job_is_created_while_redis_is_down(alice_client):
    response = alice_client.post("/api/v1/jobs/", SPEC, format="json")

    assert response.status_code == 201
    assert Job.objects.get(pk=response.json()["id"]).state == State.QUEUED


def test_a_job_is_canceled_while_redis_is_down(alice_client, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)

    response = alice_client.post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert response.status_code == 202
    job.refresh_from_db()
    assert job.state == State.CANCELED


def test_polling_the_api_warns_once_about_redis_not_per_request(alice_client, alpha, caplog):
    job = JobFactory(tenant=alpha)

    with caplog.at_level(logging.WARNING):
        answers = [alice_client.get(f"/api/v1/jobs/{job.pk}/").status_code for _ in range(3)]

    assert answers == [200, 200, 200]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_an_agents_logs_are_stored_and_its_heartbeat_ends_the_job_while_redis_is_down(
    agent, attempt
):
    lines = [{"attempt_id": attempt.pk, "rank": 0, "seq": i, "stream": "stdout", "text": f"l{i}"}
             for i in range(3)]  # fmt: skip
    exited = {"attempt_id": attempt.pk, "rank": 0, "phase": "exited", "exit_code": 0}

    logs = agent.post("/api/v1/agent/east/logs/", {"lines": lines}, format="json")
    heartbeat = agent.post("/api/v1/agent/east/heartbeat/", {"workers": [exited]}, format="json")

    assert (logs.status_code, heartbeat.status_code) == (200, 200)
    assert list(LogChunk.objects.order_by("seq").values_list("text", flat=True)) == [
        "l0", "l1", "l2"]  # fmt: skip
    assert Job.objects.get(pk=attempt.job_id).state == State.SUCCEEDED


def test_the_tenant_log_rate_is_counted_per_process_while_redis_is_down(agent, attempt, settings):
    settings.MLSCHED_TENANT_LOG_RATE = 2
    lines = [{"attempt_id": attempt.pk, "rank": 0, "seq": i, "stream": "stdout", "text": f"l{i}"}
             for i in range(4)]  # fmt: skip

    response = agent.post("/api/v1/agent/east/logs/", {"lines": lines}, format="json")

    assert response.status_code == 200
    note = "[mlsched] log lines dropped: this tenant passed 2 lines a minute"
    assert list(LogChunk.objects.order_by("seq").values_list("text", flat=True)) == [
        "l0", "l1", note]  # fmt: skip
