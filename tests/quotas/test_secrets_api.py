"""The secrets API: a tenant's owners set and delete its secrets, its members read their names,
nobody reads a value back, another team's tenant is a 404, bad input a 400 naming the field."""

import pytest

from quotas import tenant_secrets
from quotas.models import Membership, TenantSecret
from tests.factories import JobFactory, MembershipFactory, UserFactory
from tests.jobs.test_api import client_for

pytestmark = pytest.mark.django_db
URL = "/api/v1/tenants/alpha/secrets/"


def test_an_owner_sets_a_secret_and_its_members_see_its_name_not_its_value(alice, bob):
    created = client_for(alice).put(f"{URL}HF_TOKEN/", {"value": "hf_value_1"}, format="json")
    replaced = client_for(alice).put(f"{URL}HF_TOKEN/", {"value": "hf_value_2"}, format="json")

    listed = client_for(bob).get(URL)

    assert (created.status_code, replaced.status_code) == (201, 200)
    assert created.json()["name"] == "HF_TOKEN" and "value" not in created.json()
    assert [(s["name"], s["updated_by"]) for s in listed.json()["secrets"]] == [
        ("HF_TOKEN", "alice")
    ]
    assert "hf_value" not in listed.content.decode()
    assert TenantSecret.objects.get().value() == "hf_value_2"


def test_a_member_or_viewer_may_not_set_or_delete_a_secret(alpha, bob):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value")

    answers = [
        client_for(user).put(f"{URL}NEW/", {"value": "v-1234"}, format="json").status_code
        for user in (bob, viewer)
    ] + [client_for(user).delete(f"{URL}HF_TOKEN/").status_code for user in (bob, viewer)]

    assert answers == [403, 403, 403, 403]
    assert client_for(viewer).get(URL).status_code == 200
    assert list(TenantSecret.objects.values_list("name", flat=True)) == ["HF_TOKEN"]


def test_another_teams_tenant_is_a_404_whatever_the_verb(alpha, charlie):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value")
    client = client_for(charlie)

    answers = [
        client.get(URL).status_code,
        client.put(f"{URL}HF_TOKEN/", {"value": "stolen"}, format="json").status_code,
        client.delete(f"{URL}HF_TOKEN/").status_code,
    ]

    assert answers == [404, 404, 404]
    assert TenantSecret.objects.get().value() == "hf_value"


def test_a_platform_admin_sets_any_tenants_secret(alpha):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)

    answer = client_for(root).put(f"{URL}TOKEN/", {"value": "v-1234"}, format="json")

    assert answer.status_code == 201


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [("RANK", {"value": "v"}, "name"), ("9X", {"value": "v"}, "name"),
     ("OK", {"value": ""}, "value"), ("OK", {}, "value"), ("OK", {"value": 5}, "value"),
     ("OK", {"value": "a\x00b"}, "value")],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(alice, name, body, field):
    answer = client_for(alice).put(f"{URL}{name}/", body, format="json")

    assert answer.status_code == 400 and field in answer.json()
    assert not TenantSecret.objects.exists()


def test_deleting_a_secret_a_live_job_names_is_a_409_naming_the_job(alice, alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value")
    job = JobFactory(tenant=alpha, secrets=["HF_TOKEN"])

    refused = client_for(alice).delete(f"{URL}HF_TOKEN/")
    job_id = job.pk
    job.delete()
    deleted = client_for(alice).delete(f"{URL}HF_TOKEN/")
    again = client_for(alice).delete(f"{URL}HF_TOKEN/")

    assert (refused.status_code, refused.json()["jobs"]) == (409, [job_id])
    assert (deleted.status_code, again.status_code) == (204, 404)
