import pytest
from django.contrib.auth.models import Permission

from clusters.models import Cluster
from jobs.states import State
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

    assert "Canceled 1 job(s)." in page.text
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


def test_rotating_the_agent_token_stores_only_its_hash(admin_client):
    cluster = ClusterFactory(name="east")

    page = admin_client.post(
        "/admin/clusters/cluster/",
        {"action": "rotate_agent_token", "_selected_action": [cluster.pk]},
        follow=True,
    )

    token = page.text.split("Agent token for east: ")[1].split("<")[0].strip()
    cluster.refresh_from_db()
    assert token not in cluster.agent_token_hash
    assert cluster.token_matches(token)
    assert not cluster.token_matches(token + "x")


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
    form = {"name": "east", "backend": "local", "region": "", "labels": labels, **inline}

    page = admin_client.post("/admin/clusters/cluster/add/", form)

    assert page.status_code == 200  # the form again, with the error; no 500
    assert "errorlist" in page.text
    assert not Cluster.objects.exists()
