"""/healthz: the load balancers' check. The database decides it; Redis is only reported."""

import os
from unittest import mock

import pytest
from django.db import OperationalError, connection

pytestmark = pytest.mark.django_db


def test_it_answers_200_without_logging_in_while_the_database_answers(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["database"] == "ok"


def test_it_answers_a_probe_that_names_the_replica_by_its_ip_address(client):
    # Kubernetes probes and load balancers send the replica's address as the Host header.
    assert client.get("/healthz", HTTP_HOST="10.0.0.5:8000").status_code == 200
    assert client.get("/jobs/", HTTP_HOST="10.0.0.5:8000").status_code == 400  # nothing else


async def test_it_answers_a_probe_by_ip_address_over_asgi(async_client):
    response = await async_client.get("/healthz", headers={"host": "10.0.0.5:8000"})

    assert response.status_code == 200


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs a Redis (REDIS_URL)")
def test_it_reports_redis_up_when_it_answers(client):
    assert client.get("/healthz").json()["redis"] == "ok"


def test_it_answers_503_naming_the_database_when_the_database_does_not_answer(client):
    refused = OperationalError("connection to server at 10.0.0.5 refused")

    with mock.patch.object(connection, "cursor", side_effect=refused):
        response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["status"] == "failing"
    assert response.json()["database"] == "down"
    assert "10.0.0.5" not in response.text  # the failure is logged, not shown to anyone


def test_it_stays_200_and_reports_redis_down_when_redis_does_not_answer(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1

    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "down"}


def test_it_reports_redis_unused_in_the_embedded_mode(client, settings):
    settings.REDIS_URL = ""

    assert client.get("/healthz").json()["redis"] == "unused"
