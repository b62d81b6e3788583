"""GET /api/v1/maintenance/: the clusters' maintenance windows not yet ended, to any
authenticated user, first to start first, in a constant number of queries."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import MaintenanceWindow
from quotas.tokens import create_token
from tests.factories import ClusterFactory, NodeFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/maintenance/"


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def next_month() -> datetime:
    """A start a month ahead, on the hour."""
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=30)


def window(cluster, starts_at, hours=4, nodes=(), reason=""):
    made = MaintenanceWindow.objects.create(
        cluster=cluster, starts_at=starts_at, ends_at=starts_at + timedelta(hours=hours),
        reason=reason,
    )  # fmt: skip
    made.nodes.set(nodes)
    return made


def test_each_window_gives_its_cluster_nodes_times_reason_and_whether_it_is_in_progress(alice):
    east = ClusterFactory(name="east")
    nodes = [NodeFactory(cluster=east, name=name) for name in ("gpu-b", "gpu-a")]
    starts = next_month()
    planned = window(east, starts, nodes=nodes, reason="new PSUs")

    answer = client_for(alice).get(URL)

    assert answer.status_code == 200
    assert answer.json() == {
        "windows": [{
            "id": planned.pk, "cluster": "east", "nodes": ["gpu-a", "gpu-b"],
            "starts_at": f"{starts:%Y-%m-%dT%H}:00:00Z",
            "ends_at": f"{starts + timedelta(hours=4):%Y-%m-%dT%H}:00:00Z",
            "reason": "new PSUs", "in_progress": False,
        }]
    }  # fmt: skip


def test_a_window_over_every_node_gives_no_node_names_and_one_begun_is_in_progress(alice):
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east)
    window(east, timezone.now() - timedelta(minutes=5))

    (listed,) = client_for(alice).get(URL).json()["windows"]

    assert (listed["nodes"], listed["in_progress"]) == ([], True)


def test_any_user_sees_the_windows_not_yet_ended_first_to_start_first(charlie):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    now = timezone.now()
    window(east, now - timedelta(hours=3), hours=1, reason="ended")
    later = window(west, now + timedelta(hours=5), reason="later")
    tie_first = window(east, now + timedelta(hours=1), reason="tie first")
    tie_second = window(west, now + timedelta(hours=1), reason="tie second")
    under_way = window(west, now - timedelta(hours=1), reason="under way")

    listed = client_for(charlie).get(URL).json()["windows"]

    assert [w["id"] for w in listed] == [under_way.pk, tie_first.pk, tie_second.pk, later.pk]


def test_it_reads_as_many_queries_for_many_windows_as_for_one(alice):
    client = client_for(alice)
    starts = timezone.now() + timedelta(hours=1)
    east = ClusterFactory(name="east")
    window(east, starts, nodes=[NodeFactory(cluster=east)])
    with CaptureQueriesContext(connection) as one:
        client.get(URL)
    for i in range(8):
        cluster = ClusterFactory(name=f"c{i}")
        window(cluster, starts, nodes=[NodeFactory(cluster=cluster) for _ in range(3)])
        window(cluster, starts)

    with CaptureQueriesContext(connection) as many:
        answer = client.get(URL)

    assert len(answer.json()["windows"]) == 17
    assert len(many) == len(one)


def test_a_personal_api_token_reads_it(alice):
    window(ClusterFactory(name="east"), timezone.now() + timedelta(hours=1))
    _, token = create_token(alice, "maintenance")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")

    answer = client.get(URL)

    assert answer.status_code == 200 and len(answer.json()["windows"]) == 1


def test_an_anonymous_caller_is_refused_as_on_the_other_endpoints(db):
    window(ClusterFactory(name="east"), timezone.now() + timedelta(hours=1), reason="secret")

    answer = APIClient().get(URL)

    assert answer.status_code == APIClient().get("/api/v1/usage/").status_code == 401
    assert "secret" not in answer.text


def test_past_the_api_rate_a_user_gets_429(alice, settings):
    settings.MLSCHED_API_RATE = "2/minute"
    client = client_for(alice)

    codes = [client.get(URL).status_code for _ in range(3)]

    assert codes == [200, 200, 429]
