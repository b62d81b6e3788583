"""GET /api/v1/volumes/: the data volumes of the caller's teams (every team's for a platform
admin), each with its tenant, name, description, whether jobs may write to it and its
clusters' names; ``?tenant=`` for one team, another team's slug refused as an unknown one.
Where a volume is (its claim, its host folder) is not given."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from quotas.models import Membership
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    TenantFactory,
    TenantVolumeFactory,
    UserFactory,
)
from tests.jobs.test_maintenance_api import client_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/volumes/"


def listed(user, **params) -> list[dict]:
    answer = client_for(user).get(URL, params)
    assert answer.status_code == 200, answer.content
    return answer.json()["volumes"]


def test_each_volume_gives_its_tenant_name_description_access_and_clusters(alice, alpha):
    west, east = ClusterFactory(name="west"), ClusterFactory(name="east")
    TenantVolumeFactory(tenant=alpha, name="imagenet", description="ImageNet 2012, train and val")
    TenantVolumeFactory(tenant=alpha, name="checkpoints", clusters=[west, east], writable=True)

    assert listed(alice) == [
        {"tenant": "alpha", "name": "checkpoints", "description": "", "writable": True,
         "clusters": ["east", "west"]},
        {"tenant": "alpha", "name": "imagenet", "description": "ImageNet 2012, train and val",
         "writable": False, "clusters": []},
    ]  # fmt: skip


def test_where_a_volume_is_stays_the_platforms(alice, alpha):
    TenantVolumeFactory(tenant=alpha, claim="secret-claim-name", host_path="/srv/hidden/place")

    text = client_for(alice).get(URL).content.decode()

    assert "secret-claim-name" not in text and "/srv/hidden/place" not in text


def test_a_user_lists_their_teams_volumes_never_another_teams(alice, bob, charlie, alpha, gamma):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    TenantVolumeFactory(tenant=gamma, name="weights")

    for user in (alice, bob, viewer):
        assert [(v["tenant"], v["name"]) for v in listed(user)] == [("alpha", "imagenet")]
    assert [(v["tenant"], v["name"]) for v in listed(charlie)] == [("gamma", "weights")]


def test_a_platform_admin_lists_every_tenants_volumes(alpha, gamma):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    TenantVolumeFactory(tenant=gamma, name="weights")

    assert [(v["tenant"], v["name"]) for v in listed(root)] == [
        ("alpha", "imagenet"), ("gamma", "weights")
    ]  # fmt: skip


def test_tenant_narrows_to_one_of_the_callers_teams(alice, alpha):
    delta = TenantFactory(slug="delta")
    MembershipFactory(tenant=delta, user=alice, role=Membership.Role.MEMBER)
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    TenantVolumeFactory(tenant=delta, name="weights")

    assert [v["name"] for v in listed(alice, tenant="delta")] == ["weights"]


@pytest.mark.parametrize("slug", ["gamma", "no-such-team"])
def test_another_teams_slug_is_a_400_naming_tenant_as_an_unknown_one_is(alice, gamma, slug):
    TenantVolumeFactory(tenant=gamma, name="weights")

    answer = client_for(alice).get(URL, {"tenant": slug})

    assert answer.status_code == 400
    assert answer.json() == {"tenant": ["None of your tenants has this slug."]}


def test_no_volumes_is_an_empty_list(alice):
    assert listed(alice) == []


def test_an_anonymous_caller_is_refused(alpha):
    TenantVolumeFactory(tenant=alpha)

    answer = APIClient().get(URL)

    assert answer.status_code in (401, 403)
    assert "imagenet" not in answer.content.decode()


def test_the_queries_do_not_grow_with_the_volumes_and_clusters(alice, alpha):
    clusters = [ClusterFactory(name=f"c{i}") for i in range(3)]
    TenantVolumeFactory(tenant=alpha, name="v0", clusters=clusters[:1])
    with CaptureQueriesContext(connection) as few:
        listed(alice)
    for i in range(1, 6):
        TenantVolumeFactory(tenant=alpha, name=f"v{i}", clusters=clusters)

    with CaptureQueriesContext(connection) as many:
        assert len(listed(alice)) == 6

    assert len(many) == len(few)
