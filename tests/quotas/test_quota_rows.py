"""A platform admin edits a tenant's quotas on the tenant page: a row that would break the
one-quota-per-flavor rule when saved, because of rows stored meanwhile or changed in the
same save, is a form error on its flavor, never a 500 nor a half-written change."""

import threading

import pytest
from django.db import connection

from quotas.models import Quota
from tests.factories import NodeFactory, QuotaFactory, UserFactory
from tests.jobs.test_lock_order import commit_once_waited_on, other_connection
from tests.quotas.tenant_form import tenant_fields

TAKEN = "This tenant has a quota on gpu:A100 already"


@pytest.fixture
def admin_client(client, db):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def tenant_form(tenant, rows, stored=0) -> dict:
    """The tenant change form with quota ``rows`` (dicts of their fields), the first
    ``stored`` of them rows the page showed."""
    form = {
        **tenant_fields(tenant),
        "quotas-TOTAL_FORMS": str(len(rows)), "quotas-INITIAL_FORMS": str(stored),
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip
    for i, row in enumerate(rows):
        form |= {f"quotas-{i}-{field}": str(value) for field, value in row.items()}
        form[f"quotas-{i}-tenant"] = str(tenant.pk)
    return form


def quota(flavor, guaranteed, **more) -> dict:
    return {"flavor": flavor, "guaranteed": guaranteed, "borrow_limit": 0, **more}


def stored(tenant) -> list[tuple[str, int]]:
    return list(tenant.quotas.order_by("flavor").values_list("flavor", "guaranteed"))


def test_a_row_for_a_flavor_saved_since_the_page_was_drawn_is_a_form_error(admin_client, alpha):
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)  # by another admin, meanwhile

    page = admin_client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/", tenant_form(alpha, [quota("gpu:A100", 2)])
    )

    assert page.status_code == 200
    assert TAKEN in page.text
    assert stored(alpha) == [("gpu:A100", 8)]


def test_swapping_two_rows_flavors_in_one_save_is_a_form_error(admin_client, alpha):
    a100 = QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    h100 = QuotaFactory(tenant=alpha, flavor="gpu:H100", guaranteed=2)
    rows = [quota("gpu:H100", 8, id=a100.pk), quota("gpu:A100", 2, id=h100.pk)]

    page = admin_client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/", tenant_form(alpha, rows, stored=2)
    )

    assert page.status_code == 200
    assert "This tenant has a quota on gpu:H100 already" in page.text
    assert stored(alpha) == [("gpu:A100", 8), ("gpu:H100", 2)]


def test_a_row_renamed_to_the_flavor_of_a_row_deleted_in_the_same_save_is_a_form_error(
    admin_client, alpha
):
    a100 = QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    h100 = QuotaFactory(tenant=alpha, flavor="gpu:H100", guaranteed=2)
    rows = [quota("gpu:H100", 8, id=a100.pk), quota("gpu:H100", 2, id=h100.pk, DELETE="on")]

    page = admin_client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/", tenant_form(alpha, rows, stored=2)
    )

    assert page.status_code == 200
    assert "This tenant has a quota on gpu:H100 already" in page.text
    assert stored(alpha) == [("gpu:A100", 8), ("gpu:H100", 2)]


def test_a_new_row_takes_the_flavor_of_a_row_deleted_in_the_same_save(admin_client, alpha):
    old = QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    rows = [quota("gpu:A100", 8, id=old.pk, DELETE="on"), quota("gpu:A100", 4)]

    page = admin_client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/", tenant_form(alpha, rows, stored=1)
    )

    assert page.status_code == 302
    assert stored(alpha) == [("gpu:A100", 4)]


def test_rows_that_keep_their_flavors_save_as_before(admin_client, alpha):
    a100 = QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    rows = [quota("gpu:A100", 6, id=a100.pk), quota("cpu", 64_000)]

    page = admin_client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/", tenant_form(alpha, rows, stored=1)
    )

    assert page.status_code == 302
    assert stored(alpha) == [("cpu", 64_000), ("gpu:A100", 6)]


def post_beside_another_admins_add(client, alpha, url: str, form: dict):
    """POST `form` to `url` as a platform admin while another admin's save holds the tenant
    row (as an admin's save of the tenant locks it) and has added its gpu:A100 quota, which
    it commits once this save waits for it; the answer."""
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    other = other_connection()
    other.execute("SELECT 1 FROM quotas_tenant WHERE id = %s FOR NO KEY UPDATE", [alpha.pk])
    other.execute(
        "INSERT INTO quotas_quota (tenant_id, flavor, guaranteed, borrow_limit) "
        "VALUES (%s, 'gpu:A100', 8, 0)",
        [alpha.pk],
    )
    answer: dict = {}

    def save():
        try:
            answer["page"] = client.post(url, form)
        except Exception as error:  # noqa: BLE001 - the test reports it below
            answer["error"] = error
        finally:
            connection.close()

    saving = threading.Thread(target=save)
    saving.start()
    commit_once_waited_on(other, saving, "quotas_")
    assert "error" not in answer, answer.get("error")
    return answer["page"]


@pytest.mark.django_db(transaction=True)
def test_two_admins_adding_one_flavor_at_once_get_one_row_and_a_form_error(client, alpha):
    form = tenant_form(alpha, [quota("gpu:A100", 2)])

    page = post_beside_another_admins_add(
        client, alpha, f"/admin/quotas/tenant/{alpha.pk}/change/", form
    )

    assert TAKEN in page.text
    assert list(Quota.objects.values_list("flavor", "guaranteed")) == [("gpu:A100", 8)]


def test_a_gpu_type_no_node_reports_yet_is_spelled_as_other_quotas_spell_it(
    admin_client, alpha, gamma
):
    QuotaFactory(tenant=gamma, flavor="gpu:B200", guaranteed=8)

    page = admin_client.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/", tenant_form(alpha, [quota("gpu:b200", 4)])
    )

    assert page.status_code == 200
    assert "Other quotas spell this GPU type as &#x27;B200&#x27;: use gpu:B200." in page.text
    assert stored(alpha) == []


def test_a_gpu_type_as_long_as_a_node_may_have_gets_a_quota(alpha):
    longest = "X" * 64
    NodeFactory(gpu_type=longest, gpu_count=8)
    quota = Quota(tenant=alpha, flavor=f"gpu:{longest}", guaranteed=8, borrow_limit=0)

    quota.full_clean()
    quota.save()

    assert Quota.objects.get(tenant=alpha).gpu_type == longest


@pytest.mark.django_db(transaction=True)
def test_two_admins_adding_one_flavor_on_the_quota_page_get_one_row_and_a_form_error(client, alpha):
    form = {"tenant": str(alpha.pk), **quota("gpu:A100", 2)}

    page = post_beside_another_admins_add(client, alpha, "/admin/quotas/quota/add/", form)

    assert page.status_code == 200
    assert "Tenant and Flavor already exists" in page.text
    assert list(Quota.objects.values_list("flavor", "guaranteed")) == [("gpu:A100", 8)]
