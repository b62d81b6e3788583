"""Who the caller is (their tenants, the jobs granted to them) is read once per request, however
many parts of the answer ask (the visibility filter, the folded list, the answer's reader),
and afresh by the next request."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs import access
from quotas.models import Membership
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def reads_of(queries, table: str) -> int:
    return sum(f'FROM "{table}"' in query["sql"] for query in queries.captured_queries)


def test_a_folded_list_reads_the_callers_tenants_and_grants_once(alpha, alice, charlie):
    JobFactory(tenant=alpha, owner=alice)
    shared = JobFactory(owner=charlie, tenant=charlie.memberships.get().tenant)
    assign_perm("view_job", alice, shared)
    client = APIClient()
    client.force_authenticate(alice)

    with CaptureQueriesContext(connection) as queries:
        listed = client.get("/api/v1/jobs/?fold=1").json()["jobs"]

    assert len(listed) == 2
    assert reads_of(queries, "quotas_tenant") == 1
    assert reads_of(queries, "guardian_userobjectpermission") == 1
    assert reads_of(queries, "guardian_groupobjectpermission") == 1


def test_a_job_answer_reads_the_callers_tenants_once(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)
    client = APIClient()
    client.force_authenticate(alice)

    with CaptureQueriesContext(connection) as queries:
        assert client.get(f"/api/v1/jobs/{job.pk}/").status_code == 200

    # Its tenants: whether it may cancel the job asks another question (its roles in them).
    roles = sum('"role" IN' in query["sql"] for query in queries.captured_queries)
    assert reads_of(queries, "quotas_tenant") - roles == 1


def test_the_next_request_sees_a_member_who_left_as_an_outsider(alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)
    client = APIClient()
    client.force_authenticate(alice)  # the same user object for both requests
    assert client.get(f"/api/v1/jobs/{job.pk}/").status_code == 200

    Membership.objects.filter(user=alice).delete()

    assert client.get(f"/api/v1/jobs/{job.pk}/").status_code == 404


def test_the_next_request_sees_a_grant_made_after_the_first(alpha, alice, charlie):
    theirs = JobFactory(owner=charlie, tenant=charlie.memberships.get().tenant)
    client = APIClient()
    client.force_authenticate(alice)
    assert client.get(f"/api/v1/jobs/{theirs.pk}/").status_code == 404

    assign_perm("view_job", alice, theirs)

    assert client.get(f"/api/v1/jobs/{theirs.pk}/").status_code == 200


def test_outside_a_request_the_tenants_are_read_each_time(alpha, alice):
    assert access.tenant_ids(alice) == {alpha.pk}

    Membership.objects.filter(user=alice).delete()

    assert access.tenant_ids(alice) == frozenset()
