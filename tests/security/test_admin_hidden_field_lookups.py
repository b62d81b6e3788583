"""What the admin hides from a tenant admin (staff owning alpha) cannot be read back through a
lookup typed into a list's URL: a list that narrows to the rows matching it answers, row by
row, whether a guess was right."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from quotas.models import PriorityClass
from tests.factories import JobFactory, UserFactory
from tests.security.test_admin_scope import GRANTED

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant_admin(alice):
    """Alice, owner of alpha, as staff holding every model permission the admin asks for."""
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    return client


@pytest.mark.parametrize("lookup", ["notify_secret__startswith", "notify_secret__regex"])
def test_a_tenant_admin_cannot_read_the_notification_secret_through_a_list_lookup(
    tenant_admin, alpha, lookup
):
    right = "^" + alpha.notify_secret[:2] if lookup.endswith("regex") else alpha.notify_secret[:2]

    listing = tenant_admin.get("/admin/quotas/tenant/", {lookup: right})

    assert listing.status_code == 400
    assert "Alpha" not in listing.text  # the row a right guess kept


def test_a_platform_admin_still_filters_tenants_by_any_field(client, alpha):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    listing = client.get("/admin/quotas/tenant/", {"notify_secret__startswith": "zz"})

    assert listing.status_code == 200


@pytest.mark.parametrize("lookup", ["tenants", "tenants__id__in", "job", "job__id"])
def test_a_tenant_admin_cannot_tell_which_classes_another_tenant_uses(
    tenant_admin, alpha, gamma, charlie, lookup
):
    urgent = PriorityClass.objects.create(name="gamma-urgent", value=100)
    urgent.tenants.add(gamma)
    theirs = JobFactory(tenant=gamma, owner=charlie, priority_class=urgent)
    target = theirs.pk if lookup.startswith("job") else gamma.pk

    listing = tenant_admin.get("/admin/quotas/priorityclass/", {lookup: target})

    assert listing.status_code == 400
    assert "gamma-urgent" not in listing.text


def test_a_tenant_admin_still_filters_classes_by_their_own_columns(tenant_admin):
    urgent = PriorityClass.objects.create(name="urgent", value=100, may_preempt=True)
    low = PriorityClass.objects.create(name="low", value=-10)

    listing = tenant_admin.get("/admin/quotas/priorityclass/", {"may_preempt__exact": "1"})

    assert listing.status_code == 200
    assert f"/priorityclass/{urgent.pk}/change/" in listing.text
    assert f"/priorityclass/{low.pk}/change/" not in listing.text
