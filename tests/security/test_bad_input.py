"""Malformed input to the users' and the agents' API is a 400, never a 500."""

import pytest
from rest_framework.test import APIClient

from jobs.models import Job
from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db


def test_a_body_nested_too_deep_to_parse_is_a_400_and_writes_nothing(alice):
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(alice)

    response = client.post("/api/v1/jobs/", "[" * 100_000, content_type="application/json")

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
