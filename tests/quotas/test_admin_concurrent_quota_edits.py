"""Two platform admins editing one quota row, or one tenant: the one who saves second, from a
page drawn before the first one's save, is told the row changed since, instead of silently
writing over it (on the tenant's page and on the quota's own page)."""

import html
import re

import pytest
from django.test import Client

from tests.factories import QuotaFactory, UserFactory
from tests.quotas.tenant_form import tenant_fields

pytestmark = pytest.mark.django_db


@pytest.fixture
def admins(db):
    """Two superusers' clients: Root and Ruth."""
    out = []
    for name in ("root", "ruth"):
        browser = Client()
        browser.force_login(UserFactory(username=name, is_staff=True, is_superuser=True))
        out.append(browser)
    return out


@pytest.fixture
def quota(alpha):
    return QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8, borrow_limit=0)


@pytest.fixture
def tenant_page(alpha) -> str:
    return f"/admin/quotas/tenant/{alpha.pk}/change/"


def drawn_on(browser, url: str, name: str = "quotas-0-drawn") -> str:
    """The hidden `drawn` value the page at `url` holds for the form field `name`."""
    found = re.search(rf'name="{name}" value="([^"]*)"', browser.get(url).text)
    assert found, f"no {name} on the page"
    return html.unescape(found.group(1))


def tenant_form(tenant, quota, drawn: str, guaranteed: int, borrow_limit: int) -> dict:
    """The tenant page as an admin sends it: the one quota row, as edited."""
    return {
        **tenant_fields(tenant),
        "quotas-TOTAL_FORMS": "1", "quotas-INITIAL_FORMS": "1",
        "quotas-0-id": str(quota.pk), "quotas-0-tenant": str(tenant.pk),
        "quotas-0-flavor": quota.flavor, "quotas-0-guaranteed": str(guaranteed),
        "quotas-0-borrow_limit": str(borrow_limit), "quotas-0-drawn": drawn,
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip


def test_the_second_save_of_a_quota_row_on_the_tenant_page_is_refused(
    admins, alpha, quota, tenant_page
):
    root, ruth = admins
    url = tenant_page
    drawn = drawn_on(root, url)
    assert drawn == drawn_on(ruth, url)  # both pages drawn

    first = root.post(url, tenant_form(alpha, quota, drawn, guaranteed=16, borrow_limit=0))
    second = ruth.post(url, tenant_form(alpha, quota, drawn, guaranteed=8, borrow_limit=4))

    quota.refresh_from_db()
    assert first.status_code == 302
    assert second.status_code == 200
    assert "This quota was changed by someone else since the page was drawn" in second.text
    assert "flavor gpu:A100, guaranteed 16, borrow_limit 0" in second.text
    assert (quota.guaranteed, quota.borrow_limit) == (16, 0)


def test_a_save_from_a_fresh_page_goes_through(admins, alpha, quota, tenant_page):
    root, _ = admins
    drawn = drawn_on(root, tenant_page)

    answer = root.post(tenant_page, tenant_form(alpha, quota, drawn, guaranteed=16, borrow_limit=2))

    quota.refresh_from_db()
    assert answer.status_code == 302
    assert (quota.guaranteed, quota.borrow_limit) == (16, 2)


def test_the_second_save_on_the_quotas_own_page_is_refused(admins, alpha, quota):
    root, ruth = admins
    url = f"/admin/quotas/quota/{quota.pk}/change/"
    form = {"tenant": str(alpha.pk), "flavor": quota.flavor, "drawn": drawn_on(root, url, "drawn")}

    first = root.post(url, {**form, "guaranteed": "16", "borrow_limit": "0"})
    second = ruth.post(url, {**form, "guaranteed": "8", "borrow_limit": "4"})

    quota.refresh_from_db()
    assert (first.status_code, second.status_code) == (302, 200)
    assert "changed by someone else since the page was drawn" in second.text
    assert (quota.guaranteed, quota.borrow_limit) == (16, 0)


def test_a_row_deleted_since_the_page_was_drawn_is_not_written_again(
    admins, alpha, quota, tenant_page
):
    _, ruth = admins
    drawn = drawn_on(ruth, tenant_page)
    quota.delete()

    answer = ruth.post(tenant_page, tenant_form(alpha, quota, drawn, guaranteed=8, borrow_limit=4))

    assert answer.status_code == 200
    assert not alpha.quotas.exists()


def test_the_second_save_of_a_tenant_drawn_before_the_first_is_refused(admins, alpha, tenant_page):
    root, ruth = admins
    url = tenant_page
    form = {
        **tenant_fields(alpha),
        "drawn": drawn_on(root, url, "drawn"),
        "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0",
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip

    first = root.post(url, {**form, "max_gpus_per_user": "8"})
    second = ruth.post(url, {**form, "max_queued_jobs": "100"})

    alpha.refresh_from_db()
    assert (first.status_code, second.status_code) == (302, 200)
    assert "This tenant was changed by someone else since the page was drawn" in second.text
    assert (alpha.max_gpus_per_user, alpha.max_queued_jobs) == (8, None)
