import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.models import Allocation, Cluster, Node
from jobs import cycle
from jobs.models import Job
from jobs.states import State
from quotas.models import Membership
from tests.factories import ClusterFactory, JobFactory, NodeFactory, UserFactory


@pytest.fixture
def admin_client(client, db):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_the_cancel_action_cancels_live_jobs_only(admin_client):
    queued = JobFactory()
    done = JobFactory(state=State.SUCCEEDED)

    page = admin_client.post(
        "/admin/jobs/job/",
        {"action": "cancel_jobs", "_selected_action": [queued.pk, done.pk]},
        follow=True,
    )

    assert "Canceled 1 job." in page.text
    queued.refresh_from_db()
    done.refresh_from_db()
    assert (queued.state, done.state) == (State.CANCELED, State.SUCCEEDED)


def test_staff_without_the_cancel_permission_cannot_cancel_through_the_admin(client, db):
    staff = UserFactory(username="support", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(staff)
    queued = JobFactory()

    client.post("/admin/jobs/job/", {"action": "cancel_jobs", "_selected_action": [queued.pk]})

    queued.refresh_from_db()
    assert queued.state == State.QUEUED
    assert "cancel_jobs" not in client.get("/admin/jobs/job/").text


def test_a_job_cannot_be_edited_in_the_admin(admin_client):
    job = JobFactory(name="original")

    admin_client.post(f"/admin/jobs/job/{job.pk}/change/", {"name": "edited"})

    job.refresh_from_db()
    assert job.name == "original"


def test_the_cluster_page_lists_its_nodes(admin_client):
    cluster = ClusterFactory(name="east")
    NodeFactory(cluster=cluster, name="gpu-node-7")

    page = admin_client.get(f"/admin/clusters/cluster/{cluster.pk}/change/")

    assert page.status_code == 200
    assert "gpu-node-7" in page.text


def issued_agent_token(page, cluster: str) -> str:
    return re.search(rf'data-cluster="{cluster}"[^>]*value="([^"]+)"', page.text)[1]


def test_rotating_the_agent_token_stores_only_its_hash(admin_client):
    cluster = ClusterFactory(name="east")

    page = admin_client.post(
        "/admin/clusters/cluster/",
        {"action": "rotate_agent_token", "_selected_action": [cluster.pk]},
    )

    assert page.status_code == 200  # the token is on this answer, not behind a redirect
    token = issued_agent_token(page, "east")
    cluster.refresh_from_db()
    assert token not in cluster.agent_token_hash
    assert cluster.token_matches(token)
    assert not cluster.token_matches(token + "x")


def test_a_new_agent_token_is_shown_once_and_never_put_in_a_message(admin_client):
    cluster = ClusterFactory(name="east")

    page = admin_client.post(
        "/admin/clusters/cluster/",
        {"action": "rotate_agent_token", "_selected_action": [cluster.pk]},
    )
    token = issued_agent_token(page, "east")
    next_page = admin_client.get("/admin/clusters/cluster/")

    assert f"MLSCHED_AGENT_TOKEN={token} python manage.py run_agent --cluster east" in page.text
    assert "no-store" in page["Cache-Control"]
    assert "messages" not in page.cookies  # Django's message cookie: signed, not encrypted
    assert token not in next_page.text
    noted = LogEntry.objects.get()
    assert (noted.object_id, noted.get_change_message()) == (
        str(cluster.pk),
        "Issued a new agent token",
    )


@pytest.mark.parametrize("model", ["attempt", "jobevent", "logchunk"])
def test_lifecycle_records_are_listed_but_not_addable(admin_client, model):
    listing = admin_client.get(f"/admin/jobs/{model}/")
    adding = admin_client.get(f"/admin/jobs/{model}/add/")

    assert listing.status_code == 200
    assert adding.status_code == 403


@pytest.mark.parametrize(
    "labels",
    ['{"zone\\u0000": "a"}', '{"zone": "a\\u0000"}', '{"my zone": "a"}', '{"zone": 5}', '["zone"]'],
)
def test_cluster_labels_not_mapping_label_keys_to_text_are_a_form_error(admin_client, labels):
    inline = {"nodes-TOTAL_FORMS": "0", "nodes-INITIAL_FORMS": "0", "nodes-MAX_NUM_FORMS": "1000"}
    form = {"name": "east", "backend": "local", "region": "", "labels": labels, **inline,
            "placement_cost": "0"}  # fmt: skip

    page = admin_client.post("/admin/clusters/cluster/add/", form)

    assert page.status_code == 200  # the form again, with the error; no 500
    assert "errorlist" in page.text
    assert not Cluster.objects.exists()


@pytest.fixture
def running(db):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    job = JobFactory(gpus=1)
    cycle.run_cycle()
    return job


@pytest.mark.parametrize(
    "url",
    [
        lambda job: f"/admin/jobs/job/{job.pk}/delete/",
        lambda job: f"/admin/jobs/attempt/{job.attempts.get().pk}/delete/",
        lambda job: (
            f"/admin/clusters/allocation/{Allocation.objects.get(attempt__job=job).pk}/delete/"
        ),
    ],
    ids=["job", "attempt", "allocation"],
)
def test_the_records_of_running_work_cannot_be_deleted_in_the_admin(admin_client, running, url):
    response = admin_client.post(url(running), {"post": "yes"})

    assert response.status_code == 403
    assert Allocation.objects.active().filter(attempt__job=running).count() == 1


def test_the_bulk_delete_action_is_not_offered_for_jobs(admin_client, running):
    admin_client.post(
        "/admin/jobs/job/",
        {"action": "delete_selected", "_selected_action": [running.pk], "post": "yes"},
    )

    assert Job.objects.filter(pk=running.pk).exists()


def test_a_nul_in_an_admin_filter_is_a_400_naming_it(admin_client):
    response = admin_client.get("/admin/jobs/job/", {"state__exact": "\x00"})

    assert response.status_code == 400
    assert "state__exact" in response.text


def tenant_page_queries(client, tenant) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(f"/admin/quotas/tenant/{tenant.pk}/change/").status_code == 200
    return len(queries)


def test_the_tenant_page_costs_at_most_one_query_per_member(admin_client, alpha):
    # The one is Django's autocomplete widget labelling its user; each row's label used to
    # read its user and its tenant again on top of it.
    for i in range(2):
        Membership.objects.create(tenant=alpha, user=UserFactory(username=f"member-{i}"))
    few = tenant_page_queries(admin_client, alpha)
    for i in range(2, 20):
        Membership.objects.create(tenant=alpha, user=UserFactory(username=f"member-{i}"))

    assert tenant_page_queries(admin_client, alpha) - few <= 18


@pytest.fixture
def viewing_staff(client, db):
    """Staff who may look at clusters and nodes, and change nothing."""
    user = UserFactory(username="looker", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_cluster", "view_node"])
    )
    client.force_login(user)
    return client


@pytest.mark.parametrize("action", ["cordon", "drain"])
def test_staff_who_may_only_view_nodes_cannot_cordon_or_drain_them(viewing_staff, action):
    node = NodeFactory(schedulable=True)

    viewing_staff.post("/admin/clusters/node/", {"action": action, "_selected_action": [node.pk]})

    node.refresh_from_db()
    assert node.schedulable


def issues_no_agent_token(client) -> bool:
    """Whether the admin's "issue a new agent token" action, asked by `client`, leaves the
    cluster's token as it was and shows none."""
    cluster = ClusterFactory(name="east")
    before = cluster.agent_token_hash

    page = client.post(
        "/admin/clusters/cluster/",
        {"action": "rotate_agent_token", "_selected_action": [cluster.pk]},
    )

    cluster.refresh_from_db()
    return cluster.agent_token_hash == before and "agent-token" not in page.text


def test_staff_who_may_only_view_clusters_cannot_issue_an_agent_token(viewing_staff):
    assert issues_no_agent_token(viewing_staff)


def test_nodes_are_cordoned_and_uncordoned_from_the_node_list(admin_client):
    nodes = [NodeFactory(), NodeFactory()]
    chosen = {"_selected_action": [n.pk for n in nodes]}

    admin_client.post("/admin/clusters/node/", {"action": "cordon", **chosen})
    assert {n.schedulable for n in Node.objects.all()} == {False}
    admin_client.post("/admin/clusters/node/", {"action": "uncordon", **chosen})
    assert {n.schedulable for n in Node.objects.all()} == {True}
