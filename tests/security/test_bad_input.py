"""Malformed input to the users' and the agents' API, and to the portal, is never a 500: a
body or a submission is refused with a 400; an id or a date out of range finds nothing."""

import json

import pytest
from rest_framework.test import APIClient

from jobs.models import Job
from tests.factories import ClusterFactory, JobFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db
HUGE = "9" * 25  # past any bigint
SPEC = {"tenant": "alpha", "name": "x", "family": "training", "image": "i", "command": ["true"],
        "cpu_milli": 1000, "memory_mb": 100, "max_runtime_s": 60}  # fmt: skip


def test_a_body_nested_too_deep_to_parse_is_a_400_and_writes_nothing(api):
    response = api.post("/api/v1/jobs/", "[" * 100_000, content_type="application/json")

    assert response.status_code == 400
    assert "JSON" in response.json()["detail"]
    assert not Job.objects.exists()


def test_an_agent_report_nested_too_deep_to_parse_is_a_400():
    cluster = ClusterFactory(name="east")
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Agent {cluster.rotate_token()}")

    response = client.post(
        "/api/v1/agent/east/heartbeat/", "[" * 100_000, content_type="application/json"
    )

    assert response.status_code == 400
    assert "JSON" in response.json()["detail"]


@pytest.mark.parametrize(
    "url",
    [
        f"/api/v1/jobs/?before={HUGE}",
        f"/api/v1/jobs/?batch={HUGE}",
        f"/api/v1/jobs/{HUGE}/",
        f"/api/v1/jobs/{HUGE}/events/",
        f"/api/v1/jobs/JOB/logs/?after={HUGE}",
        "/api/v1/usage/?since=1000-01-01&until=1000-06-01",
        "/api/v1/usage/?since=9999-06-01&until=9999-12-31",
        "/api/v1/usage/?until=1000-01-02",
    ],
)
def test_an_id_or_a_date_out_of_range_in_an_api_query_is_not_an_error(api, alice, alpha, url):
    job = JobFactory(tenant=alpha, owner=alice)

    response = api.get(url.replace("JOB", str(job.pk)))

    assert response.status_code < 500, response.content[:300]


@pytest.mark.parametrize(
    "url",
    [
        f"/?before={HUGE}",
        f"/jobs/{HUGE}/",
        "/usage/?until=1000-01-02",
        "/usage.csv?until=1000-01-02",
        "/usage-by-label.csv?until=1000-01-02&by_label=project",
    ],
)
def test_an_id_or_a_date_out_of_range_in_a_portal_query_is_not_an_error(portal, url):
    response = portal.get(url)

    assert response.status_code < 500, response.content[:300]


@pytest.mark.parametrize(
    "changes",
    [
        {"name": "n\x00"},
        {"image": "i\x00"},
        {"command": ["a\x00"]},
        {"gpu_types": ["A\x00"]},
        {"cluster_selector": {"a": "b\x00"}},
        {"idempotency_key": "k\x00"},
        {"priority_class": "x\x00"},
        {"tenant": ["alpha"]},
        {"name": "\ud800"},
        {"gpu_types": ["\ud800"]},
        {"env": {"A": "\ud800"}},
        {"cluster_selector": {"a": "\ud800"}},
    ],
)
def test_a_submission_with_a_nul_or_a_lone_surrogate_is_refused(api, alpha, changes):
    PriorityClassFactory()
    body = json.dumps({**SPEC, **changes})  # a lone surrogate escaped, as \ud800

    response = api.post("/api/v1/jobs/", body, content_type="application/json")

    assert response.status_code == 400, response.content[:300]
    assert not Job.objects.exists()


def test_a_batch_that_would_store_too_much_is_a_400_naming_shards(api, alpha):
    PriorityClassFactory()
    env = {"BIG": "x" * 100_000}  # within the environment's own limit
    batch = {**SPEC, "family": "batch_inference", "gpus": 0, "env": env}

    refused = api.post("/api/v1/jobs/", {**batch, "shards": 1000}, format="json")
    accepted = api.post("/api/v1/jobs/", {**batch, "shards": 2}, format="json")

    assert refused.status_code == 400
    assert "shards" in refused.json() and "MiB" in refused.json()["shards"][0]
    assert accepted.status_code == 201
    assert Job.objects.count() == 2  # the accepted batch's shards only
