"""The tenant page in the admin costs the same queries however many members and quotas the
tenant has."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import MembershipFactory, QuotaFactory, UserFactory


@pytest.fixture
def admin_client(client, db):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def tenant_page(client, tenant) -> tuple[str, int]:
    """The tenant's change page, and how many queries drawing it took."""
    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"/admin/quotas/tenant/{tenant.pk}/change/")
    assert page.status_code == 200
    return page.text, len(queries)


def test_the_tenant_page_costs_the_same_queries_for_20_members_as_for_1(admin_client, alpha):
    MembershipFactory(tenant=alpha)
    tenant_page(admin_client, alpha)  # caches warmed
    _, one = tenant_page(admin_client, alpha)
    MembershipFactory.create_batch(19, tenant=alpha)

    _, twenty = tenant_page(admin_client, alpha)

    assert twenty == one


def test_the_tenant_page_costs_the_same_queries_for_4_quotas_as_for_1(admin_client, alpha):
    # Each quota's row is labelled with its tenant's name.
    QuotaFactory(tenant=alpha, flavor="gpu:A100")
    tenant_page(admin_client, alpha)  # caches warmed
    _, one = tenant_page(admin_client, alpha)
    for flavor in ("gpu:H100", "cpu", "memory"):
        QuotaFactory(tenant=alpha, flavor=flavor)

    _, four = tenant_page(admin_client, alpha)

    assert four == one


def test_the_tenant_page_shows_each_members_user_chosen_in_their_row(admin_client, alpha):
    users = [MembershipFactory(tenant=alpha).user for _ in range(3)]

    text, _ = tenant_page(admin_client, alpha)

    for user in users:
        assert f'<option value="{user.pk}" selected>{user.username}</option>' in text
