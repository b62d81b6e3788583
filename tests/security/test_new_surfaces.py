"""The newer surfaces as their attackers try them: a tenant admin (staff owning alpha) on the
admin's node actions and changelists, an outsider holding a view_job or cancel_job grant on the
API, members against the limit on queued jobs, and the shared metrics cache."""

import json

import pytest
from django.contrib.auth.models import Permission
from django.core.cache import caches
from django.test import Client
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from clusters.models import Allocation, Node
from jobs import metrics
from jobs.admin import CappedPaginator
from jobs.models import Attempt, Job
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs.test_admin import issues_no_agent_token
from tests.quotas.test_quota_rows import tenant_form
from tests.security.test_admin_scope import GRANTED, job_with_records

pytestmark = pytest.mark.django_db

# What a platform admin might hand a tenant admin besides: the cluster and node pages.
CLUSTER_PERMISSIONS = ["view_cluster", "change_cluster", "view_node", "change_node"]


@pytest.fixture
def tenant_admin(alice):
    """Alice, owner of alpha, as staff holding every model permission the admin asks for,
    clusters' and nodes' included; her server errors come back as 500 answers."""
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    codenames = GRANTED + CLUSTER_PERMISSIONS
    alice.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    return client


@pytest.fixture
def gamma_job(gamma, charlie):
    """Charlie's job in gamma with an attempt holding a GPU of a node, an event and a log line."""
    return job_with_records(gamma, charlie, "gamma-secret-run")


def api(user) -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(user)
    return client


# Node actions: platform-wide, so for platform admins only.


def test_a_tenant_admin_cannot_drain_the_node_another_tenants_job_runs_on(tenant_admin, gamma_job):
    node = Allocation.objects.get(attempt__job=gamma_job).node

    tenant_admin.post("/admin/clusters/node/", {"action": "drain", "_selected_action": [node.pk]})

    attempt = Attempt.objects.get(job=gamma_job)
    assert attempt.stop_requested_at is None
    assert Node.objects.get(pk=node.pk).schedulable


@pytest.mark.parametrize("action, schedulable", [("cordon", True), ("uncordon", False)])
def test_a_tenant_admin_cannot_cordon_or_uncordon_a_node(tenant_admin, action, schedulable):
    node = NodeFactory(schedulable=schedulable)

    tenant_admin.post("/admin/clusters/node/", {"action": action, "_selected_action": [node.pk]})

    assert Node.objects.get(pk=node.pk).schedulable == schedulable


def test_a_tenant_admin_cannot_edit_a_node(tenant_admin):
    node = NodeFactory(gpu_count=8)
    form = {"cluster": node.cluster_id, "name": node.name, "cpu_milli": 1, "memory_mb": 1,
            "gpu_type": "A100", "gpu_count": 0, "schedulable": "on", "healthy": "on"}  # fmt: skip

    tenant_admin.post(f"/admin/clusters/node/{node.pk}/change/", form)

    assert Node.objects.get(pk=node.pk).gpu_count == 8


def test_a_tenant_admin_cannot_issue_a_clusters_agent_token(tenant_admin):
    assert issues_no_agent_token(tenant_admin)


def test_a_tenant_admin_still_looks_at_the_nodes_and_the_workers_running(tenant_admin, gamma_job):
    page = tenant_admin.get("/admin/clusters/node/")

    assert page.status_code == 200
    assert "workers running" in page.text.lower()
    assert "gamma-secret-run" not in page.text
    assert 'value="drain"' not in page.text


# Lookups typed into a changelist's URL.

CHANGELISTS = ["jobs/job", "jobs/attempt", "jobs/jobevent", "jobs/logchunk", "clusters/allocation"]


@pytest.mark.parametrize("model", CHANGELISTS)
@pytest.mark.parametrize(
    "lookup",
    ["id__regex=(", "name__regex=(", "reason__iregex=[", "text__regex=(", "created__year=99999",
     "time__year=99999"],
)  # fmt: skip
def test_a_lookup_the_database_cannot_run_is_a_bad_parameter_not_a_500(
    tenant_admin, alpha, alice, gamma_job, model, lookup
):
    job_with_records(alpha, alice, "alpha-own-run")

    page = tenant_admin.get(f"/admin/{model}/?{lookup}")

    assert page.status_code in (200, 302, 400)
    if page.status_code == 302:
        assert page["Location"] == f"/admin/{model}/?e=1"


@pytest.mark.parametrize("lookup", ["name__regex=(", "slug__regex=("])
def test_a_bad_lookup_on_the_tenant_and_node_lists_is_no_500_either(tenant_admin, alpha, lookup):
    NodeFactory()

    for model in ("quotas/tenant", "clusters/node", "clusters/cluster"):
        assert tenant_admin.get(f"/admin/{model}/?{lookup}").status_code != 500


@pytest.mark.parametrize("model", CHANGELISTS)
@pytest.mark.parametrize(
    "lookup",
    ["tenant__id={gamma}", "tenant={gamma}", "job__tenant={gamma}", "owner__username=charlie",
     "job__owner__username=charlie", "id__lt=99999999999999999999", "name__regex=gamma",
     "reason__regex=.", "text__regex=.", "attempt__job__tenant__id={gamma}", "id__gte=0"],
)  # fmt: skip
def test_no_lookup_typed_into_the_url_shows_another_tenants_rows(
    tenant_admin, alpha, alice, gamma, gamma_job, model, lookup
):
    job_with_records(alpha, alice, "alpha-own-run")

    page = tenant_admin.get(f"/admin/{model}/?{lookup.format(gamma=gamma.pk)}", follow=True)

    assert page.status_code in (200, 400)
    assert "gamma-secret-run" not in page.text
    assert str(gamma_job) not in page.text


def test_the_older_rows_link_pages_on_through_the_tenant_admins_own_rows(
    tenant_admin, alpha, alice, gamma, charlie, monkeypatch
):
    monkeypatch.setattr(CappedPaginator, "CAP", 3)
    monkeypatch.setattr("jobs.admin.JobAdmin.list_per_page", 2)
    ours = [JobFactory(tenant=alpha, owner=alice, name=f"alpha-{i}") for i in range(3)]
    theirs = JobFactory(tenant=gamma, owner=charlie, name="gamma-between")
    ours.append(JobFactory(tenant=alpha, owner=alice, name="alpha-3"))

    first = tenant_admin.get("/admin/jobs/job/")
    older = tenant_admin.get(f"/admin/jobs/job/?id__lt={ours[2].pk}")

    assert f"?id__lt={ours[2].pk}" in first.text  # the page's last row: alpha-2
    assert "alpha-1" in older.text and "alpha-0" in older.text
    assert theirs.name not in first.text + older.text


# A job shared with an outsider through view_job.


def portal_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_shared_job_does_not_name_the_team_job_it_was_resubmitted_from(alice, alpha, charlie):
    earlier = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)
    again = JobFactory(tenant=alpha, owner=alice, resubmitted_from=earlier)
    assign_perm("jobs.view_job", charlie, again)

    shown = api(charlie).get(f"/api/v1/jobs/{again.pk}/").json()
    listed = api(charlie).get("/api/v1/jobs/").json()["jobs"]

    assert shown["resubmitted_from"] is None
    assert [job["resubmitted_from"] for job in listed] == [None]
    page = portal_of(charlie).get(f"/jobs/{again.pk}/").text
    assert "resubmitted-from" not in page and f"/jobs/{earlier.pk}/" not in page


def test_the_team_still_sees_what_a_job_was_resubmitted_from(alice, alpha, charlie):
    earlier = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)
    again = JobFactory(tenant=alpha, owner=alice, resubmitted_from=earlier)
    assign_perm("jobs.view_job", charlie, earlier)
    assign_perm("jobs.view_job", charlie, again)

    assert api(alice).get(f"/api/v1/jobs/{again.pk}/").json()["resubmitted_from"] == earlier.pk
    assert api(charlie).get(f"/api/v1/jobs/{again.pk}/").json()["resubmitted_from"] == earlier.pk
    assert f'href="/jobs/{earlier.pk}/"' in portal_of(charlie).get(f"/jobs/{again.pk}/").text


# Canceling the jobs a filter names.


def cancel(user, **filters):
    return api(user).post(
        "/api/v1/jobs/cancel/", json.dumps(filters), content_type="application/json"
    )


def test_another_tenants_jobs_and_jobs_seen_through_view_job_answer_as_no_jobs(
    alice, alpha, charlie, gamma
):
    theirs = JobFactory(tenant=gamma, owner=charlie, name="sweep")
    shown = JobFactory(tenant=gamma, owner=charlie, name="sweep")
    assign_perm("jobs.view_job", alice, shown)

    named = cancel(alice, ids=[theirs.pk, shown.pk], name="sweep")
    unknown = cancel(alice, ids=[10**12], name="sweep")
    by_name = cancel(alice, name="sweep")

    assert named.json() == unknown.json() == by_name.json() == {"canceled": [], "more": False}
    assert {Job.objects.get(pk=j.pk).state for j in (theirs, shown)} == {State.QUEUED}


def test_a_grant_on_one_shard_cancels_that_shard_alone(alice, alpha, charlie):
    first = JobFactory(tenant=alpha, owner=alice, shards=3, family="batch_inference")
    rest = [
        JobFactory(tenant=alpha, owner=alice, shards=3, family="batch_inference", parent=first,
                   shard_index=i)
        for i in (1, 2)
    ]  # fmt: skip
    assign_perm("jobs.cancel_job", charlie, rest[0])

    answer = cancel(charlie, ids=[first.pk, rest[0].pk, rest[1].pk]).json()

    assert answer == {"canceled": [rest[0].pk], "more": False}
    assert Job.objects.get(pk=first.pk).state == State.QUEUED


# The limit on queued jobs.


def submission(tenant, **changes) -> dict:
    spec = {"tenant": tenant.slug, "name": "run", "family": "training", "image": "python:3.11",
            "command": ["python", "train.py"], "cpu_milli": 1000, "memory_mb": 1000,
            "max_runtime_s": 60}  # fmt: skip
    return {**spec, **changes}


def test_a_resubmission_past_the_limit_is_refused_and_names_only_the_callers_tenant(
    alice, alpha, gamma, charlie
):
    ended = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)
    JobFactory(tenant=alpha, owner=alice)
    JobFactory.create_batch(3, tenant=gamma, owner=charlie)
    alpha.max_queued_jobs = 1
    alpha.save()

    refused = api(alice).post(f"/api/v1/jobs/{ended.pk}/resubmit/", {}, format="json")

    assert refused.status_code == 400
    assert refused.json()["tenant"] == [
        "alpha has 1 jobs queued and may have at most 1 (max_queued_jobs), not one more: wait "
        "for some to start, or cancel some."
    ]
    assert Job.objects.filter(tenant=alpha, state=State.QUEUED).count() == 1


def test_a_new_idempotency_key_is_no_way_past_the_limit(alice, alpha):
    PriorityClassFactory(name="normal")
    alpha.max_queued_jobs = 1
    alpha.save()

    first = api(alice).post("/api/v1/jobs/", submission(alpha, idempotency_key="a"), format="json")
    again = api(alice).post("/api/v1/jobs/", submission(alpha, idempotency_key="a"), format="json")
    other = api(alice).post("/api/v1/jobs/", submission(alpha, idempotency_key="b"), format="json")

    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 400)


@pytest.mark.parametrize("superuser", [False, True])
def test_only_a_platform_admin_sets_the_limit_in_the_admin(client, alpha, alice, superuser):
    # alice owns alpha: as staff without superuser rights, its tenant admin.
    alice.is_staff, alice.is_superuser = True, superuser
    alice.save(update_fields=["is_staff", "is_superuser"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    client.force_login(alice)
    form = {**tenant_form(alpha, []), "max_queued_jobs": "100000"}

    client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    alpha.refresh_from_db()
    assert alpha.max_queued_jobs == (100000 if superuser else None)


# The platform-wide metrics shared through the cache.


def test_the_shared_metrics_hold_no_tenants_figures(client, alice, alpha, gamma, charlie, settings):
    settings.MLSCHED_METRICS_CACHE_S = 60
    JobFactory(tenant=gamma, owner=charlie, name="gamma-secret-run", state=State.RUNNING)
    client.force_login(alice)

    assert client.get("/overview/").status_code == 200

    shared = caches["shared"].get(metrics.PLATFORM_KEY)
    assert shared is not None
    labels = {str(value) for m in shared.clusters + shared.control
              for sample, _ in m.samples for value in sample.values()}  # fmt: skip
    assert not labels & {"alpha", "gamma", "gamma-secret-run", "Alpha", "Gamma"}
    assert {m.name for m in shared.clusters + shared.control}.isdisjoint(
        {"mlsched_jobs", "mlsched_queue_wait_seconds_by_tenant", "mlsched_jobs_finished"}
    )
