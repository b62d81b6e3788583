"""Tenants' secrets in the admin: platform admins (superusers) manage every tenant's, a tenant
admin (staff owning alpha) their own tenants' only. A value is written, never shown again; a
save or a deletion goes through the verbs the API uses, and what they refuse is said, nothing
written."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.factories import JobFactory
from tests.quotas.admin_pages import delete_selected, said, staff_client, tenant_admin_of

pytestmark = pytest.mark.django_db

SECRETS = "/admin/quotas/tenantsecret/"


@pytest.fixture
def tenant_admin(alice):
    """Alice, owner of alpha, as staff holding every model permission the admin asks for."""
    return tenant_admin_of(alice, "tenantsecret")


def test_a_platform_admin_adds_a_secret_stored_sealed(platform_admin, alpha):
    added = platform_admin.post(
        f"{SECRETS}add/", {"tenant": alpha.pk, "name": "HF_TOKEN", "value": "hf_value_1"}
    )

    secret = TenantSecret.objects.get(tenant=alpha, name="HF_TOKEN")
    assert added.status_code == 302
    assert secret.value() == "hf_value_1"
    assert "hf_value_1" not in secret.sealed
    assert secret.updated_by == platform_admin.user


def test_the_change_page_never_contains_the_value_nor_its_sealed_form(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    page = platform_admin.get(f"{SECRETS}{secret.pk}/change/")

    assert page.status_code == 200 and "HF_TOKEN" in page.text
    assert "hf_value_1" not in page.text
    assert secret.sealed not in page.text


def test_a_staff_user_who_may_only_view_secrets_is_not_shown_the_value(alice, alpha):
    secret, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")
    viewer = staff_client(alice, ["view_tenantsecret"])

    page = viewer.get(f"{SECRETS}{secret.pk}/change/")

    assert page.status_code == 200 and "HF_TOKEN" in page.text
    assert "hf_value_1" not in page.text


def test_a_blank_value_on_change_keeps_the_stored_one(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    saved = platform_admin.post(f"{SECRETS}{secret.pk}/change/", {"value": ""})

    assert saved.status_code == 302
    assert TenantSecret.objects.get(pk=secret.pk).value() == "hf_value_1"


def test_a_value_on_change_replaces_the_stored_one_and_the_name_stays(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    platform_admin.post(f"{SECRETS}{secret.pk}/change/", {"name": "OTHER", "value": "hf_value_2"})

    (stored,) = TenantSecret.objects.all()
    assert (stored.name, stored.value()) == ("HF_TOKEN", "hf_value_2")
    assert stored.updated_by == platform_admin.user


def test_a_tenant_admin_lists_and_opens_only_their_own_tenants_secrets(tenant_admin, alpha, gamma):
    tenant_secrets.put(alpha, "ALPHA_TOKEN", "alpha-value")
    theirs, _ = tenant_secrets.put(gamma, "GAMMA_TOKEN", "gamma-value")

    listing = tenant_admin.get(SECRETS)
    other = tenant_admin.get(f"{SECRETS}{theirs.pk}/change/")

    assert "ALPHA_TOKEN" in listing.text
    assert "GAMMA_TOKEN" not in listing.text
    assert other.status_code == 302  # to the admin's index: "does not exist"


def test_a_tenant_admin_adds_secrets_to_their_own_tenants_only(tenant_admin, alpha, gamma):
    form = tenant_admin.get(f"{SECRETS}add/")
    own = tenant_admin.post(f"{SECRETS}add/", {"tenant": alpha.pk, "name": "A", "value": "v-1"})
    other = tenant_admin.post(f"{SECRETS}add/", {"tenant": gamma.pk, "name": "G", "value": "v-2"})

    assert "Alpha" in form.text and "Gamma" not in form.text
    assert own.status_code == 302
    assert other.status_code == 200 and other.context["adminform"].form.errors["tenant"]
    assert list(TenantSecret.objects.values_list("tenant__slug", "name")) == [("alpha", "A")]


@pytest.mark.parametrize("name", ["RANK", "9X", "MLSCHED_JOB_ID"])
def test_a_bad_name_is_a_form_error_and_nothing_is_written(platform_admin, alpha, name):
    page = platform_admin.post(
        f"{SECRETS}add/", {"tenant": alpha.pk, "name": name, "value": "hf_value_1"}
    )

    assert page.status_code == 200 and page.context["adminform"].form.errors["name"]
    assert "hf_value_1" not in page.text
    assert not TenantSecret.objects.exists()


def test_a_secret_past_the_tenants_limit_is_a_form_error_on_its_name(
    platform_admin, alpha, monkeypatch
):
    monkeypatch.setattr(tenant_secrets, "MAX_SECRETS_PER_TENANT", 1)
    tenant_secrets.put(alpha, "FIRST", "first-value")

    page = platform_admin.post(
        f"{SECRETS}add/", {"tenant": alpha.pk, "name": "SECOND", "value": "second-value"}
    )

    assert page.status_code == 200
    assert "at most 1 secrets" in page.context["adminform"].form.errors["name"][0]
    assert list(TenantSecret.objects.values_list("name", flat=True)) == ["FIRST"]


def test_deleting_a_secret_a_live_job_names_keeps_it_and_says_which_job(tenant_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")
    job = JobFactory(tenant=alpha, secrets=["HF_TOKEN"])

    refused = tenant_admin.post(f"{SECRETS}{secret.pk}/delete/", {"post": "yes"})

    assert refused.status_code == 302 and refused.url == f"{SECRETS}{secret.pk}/change/"
    assert TenantSecret.objects.filter(pk=secret.pk).exists()
    (message,) = said(refused)
    assert "Not deleted" in message and f"({job.pk})" in message


def test_deleting_a_secret_no_live_job_names_deletes_it(tenant_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    deleted = tenant_admin.post(f"{SECRETS}{secret.pk}/delete/", {"post": "yes"})

    assert deleted.status_code == 302
    assert not TenantSecret.objects.exists()


def test_deleting_selected_secrets_deletes_the_free_ones_and_names_the_job_keeping_one(
    tenant_admin, alpha
):
    kept, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")
    free, _ = tenant_secrets.put(alpha, "OLD_TOKEN", "old-value")
    job = JobFactory(tenant=alpha, secrets=["HF_TOKEN"])

    refusal, success = delete_selected(tenant_admin, SECRETS, [kept, free])

    assert list(TenantSecret.objects.values_list("name", flat=True)) == ["HF_TOKEN"]
    assert "HF_TOKEN of Alpha not deleted" in refusal and f"({job.pk})" in refusal
    assert success == "Deleted 1 secret."


def test_the_sealed_form_cannot_be_looked_up_through_the_list(platform_admin, alpha):
    secret, _ = tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")

    listing = platform_admin.get(SECRETS, {"sealed__startswith": secret.sealed[:4]})

    assert listing.status_code == 400
