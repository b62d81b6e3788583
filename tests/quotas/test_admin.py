import re

import pytest
from django.contrib import admin
from django.test import RequestFactory
from django.utils import timezone

from clusters.models import Allocation
from quotas.admin_scope import InlinesCapped
from quotas.models import Membership, Tenant
from tests.factories import (
    AttemptFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    UserFactory,
)
from tests.quotas.tenant_form import tenant_fields
from tests.test_admin_bad_input import sent_back


@pytest.fixture
def admin_client(client, db):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def hold_gpus(tenant, node, count, active=True):
    attempt = AttemptFactory(job=JobFactory(tenant=tenant), cluster=node.cluster)
    for index in range(count):
        Allocation.objects.create(
            attempt=attempt, node=node, slot=index, gpu_index=index, gpu_milli=1000,
            cpu_milli=1000 if index == 0 else 0, active=active,
            released=None if active else timezone.now(),
        )  # fmt: skip


def test_it_shows_quota_usage_beside_each_quota(admin_client, alpha):
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    QuotaFactory(tenant=alpha, flavor="cpu", guaranteed=10_000)
    node = NodeFactory()
    hold_gpus(alpha, node, 2)
    hold_gpus(alpha, node, 1, active=False)

    page = admin_client.get(f"/admin/quotas/tenant/{alpha.pk}/change/")

    assert page.status_code == 200
    assert "2 GPUs (25% of guarantee)" in page.text
    assert "1000 millicores (10% of guarantee)" in page.text


def test_the_quota_list_gives_each_quotas_unit(admin_client, alpha):
    for flavor in ("gpu:A100", "cpu", "memory"):
        QuotaFactory(tenant=alpha, flavor=flavor, guaranteed=8)

    page = admin_client.get("/admin/quotas/quota/").text

    units = dict(re.findall(r'<td class="field-flavor">([^<]+)</td><td class="field-unit">([^<]+)<',
                            page))  # fmt: skip
    assert units == {"gpu:A100": "GPUs", "cpu": "millicores", "memory": "MiB"}


def test_the_tenant_page_names_its_limits_with_their_units(admin_client, alpha):
    page = admin_client.get(f"/admin/quotas/tenant/{alpha.pk}/change/").text

    labels = re.findall(r'<label[^>]*for="id_[a-z_]+"[^>]*>([^<]+):</label>', page)
    for label in ("Most jobs queued", "Most GPUs per user", "GPU-hours a month",
                  "GPU idle limit (minutes)", "Notification URL"):  # fmt: skip
        assert label in labels


def test_it_does_not_count_other_tenants_usage(admin_client, alpha, gamma):
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    hold_gpus(gamma, NodeFactory(), 4)

    page = admin_client.get(f"/admin/quotas/tenant/{alpha.pk}/change/")

    assert "0 GPUs (0% of guarantee)" in page.text


def tenant_form(tenant, flavor: str, guaranteed: int, borrow_limit: int) -> dict:
    """The tenant change form with one new quota row and no members."""
    return {
        **tenant_fields(tenant),
        "quotas-TOTAL_FORMS": "1", "quotas-INITIAL_FORMS": "0",
        "quotas-0-flavor": flavor, "quotas-0-guaranteed": str(guaranteed),
        "quotas-0-borrow_limit": str(borrow_limit),
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip


def test_it_refuses_an_unknown_flavor(admin_client, alpha):
    form = tenant_form(alpha, "tpu", 4, 0)

    page = admin_client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    assert page.status_code == 200
    assert "is not a flavor" in page.text
    assert not alpha.quotas.exists()


def test_it_saves_a_quota_from_the_tenant_page(admin_client, alpha):
    form = tenant_form(alpha, "gpu:H100", 16, 4)

    page = admin_client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    assert page.status_code == 302
    quota = alpha.quotas.get()
    assert (quota.flavor, quota.guaranteed, quota.borrow_limit) == ("gpu:H100", 16, 4)


def test_it_refuses_a_gpu_type_spelled_unlike_the_nodes(admin_client, alpha):
    NodeFactory(gpu_type="A100")
    form = tenant_form(alpha, "gpu:a100", 8, 0)

    page = admin_client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    assert page.status_code == 200
    assert "use gpu:A100" in page.text
    assert not alpha.quotas.exists()


def test_a_quota_on_a_gpu_type_no_node_has_says_so(admin_client, alpha):
    NodeFactory(gpu_type="A100")
    QuotaFactory(tenant=alpha, flavor="gpu:B200", guaranteed=8)

    page = admin_client.get(f"/admin/quotas/tenant/{alpha.pk}/change/")

    assert "no node has GPU type &#x27;B200&#x27; yet" in page.text


@pytest.mark.parametrize("user", ["x", "1.5", "{"])
def test_a_member_row_naming_no_user_id_is_an_error_on_its_user(admin_client, alpha, bob, user):
    row = Membership.objects.get(tenant=alpha, user=bob)
    form = {
        **tenant_fields(alpha, name="Renamed"),
        "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0",
        "memberships-TOTAL_FORMS": "1", "memberships-INITIAL_FORMS": "1",
        "memberships-0-id": str(row.pk), "memberships-0-tenant": str(alpha.pk),
        "memberships-0-user": user, "memberships-0-role": "viewer",
    }  # fmt: skip
    admin_client.raise_request_exception = False

    page = admin_client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    assert page.status_code == 200
    assert "Select a valid choice" in page.text
    assert Membership.objects.get(pk=row.pk).role == Membership.Role.MEMBER
    assert Tenant.objects.get(pk=alpha.pk).name == "Alpha"


def members_formset(page):
    """The member rows' formset the tenant page was drawn with."""
    inlines = page.context["inline_admin_formsets"]
    return next(inline.formset for inline in inlines if inline.formset.prefix == "memberships")


def test_a_tenant_page_sent_saying_a_million_member_rows_is_refused_building_few(
    admin_client, alpha, bob
):
    form = {
        **tenant_fields(alpha, name="Renamed"),
        "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0",
        "memberships-TOTAL_FORMS": "1000000", "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip

    page = admin_client.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    assert page.status_code == 200
    members = members_formset(page)
    assert len(members.forms) <= 1 + InlinesCapped.NEW_ROWS  # bob's row and the new ones
    assert members.non_form_errors() == [
        f"Please submit at most {1 + InlinesCapped.NEW_ROWS} forms."
    ]
    assert Tenant.objects.get(pk=alpha.pk).name == "Alpha"


def test_a_tenant_page_holding_more_members_than_it_may_add_saves_one_more(admin_client, alpha):
    MembershipFactory.create_batch(InlinesCapped.NEW_ROWS + 5, tenant=alpha)
    newcomer = UserFactory(username="newcomer")
    row = f"memberships-{InlinesCapped.NEW_ROWS + 5}"  # the blank row after the stored ones

    page = sent_back(admin_client, f"/admin/quotas/tenant/{alpha.pk}/change/",
                     **{f"{row}-user": str(newcomer.pk), f"{row}-role": "viewer"})  # fmt: skip

    assert page.status_code == 302
    assert alpha.memberships.get(user=newcomer).role == Membership.Role.VIEWER


def test_every_admin_page_builds_at_most_its_rows_and_a_few_new_ones_of_each_inline(db):
    request = RequestFactory().get("/")
    request.user = UserFactory(username="root", is_staff=True, is_superuser=True)
    capped = {}

    for model_admin in admin.site._registry.values():
        for formset, inline in model_admin.get_formsets_with_inlines(request):
            capped[type(inline).__name__] = formset.absolute_max  # an add page: no rows yet

    assert set(capped.values()) == {InlinesCapped.NEW_ROWS}, capped
    assert {"QuotaInline", "MembershipInline", "AttemptInline", "PeriodicTaskInline"} <= set(capped)
