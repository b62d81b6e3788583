"""A tenant admin's save of their tenant writes back every field of the row Django read before
the save took its lock; a platform admin's change committed in between to a field that form
does not write (the fair share) is kept, not overwritten with what was read."""

import pytest
from django.contrib.admin.sites import site
from django.contrib.auth.models import Permission
from django.test import RequestFactory

from quotas.models import Tenant
from tests.security.test_admin_scope import GRANTED

pytestmark = pytest.mark.django_db


def test_a_change_committed_after_the_row_was_read_is_kept(alpha, alice):
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    request = RequestFactory().post("/")
    request.user = alice
    tenant_admin = site._registry[Tenant]
    read = tenant_admin.get_object(request, str(alpha.pk))  # as Django reads it for the save
    drawn = tenant_admin.get_form(request, read)(instance=read).fields["drawn"].initial
    Tenant.objects.filter(pk=alpha.pk).update(fair_share_weight=2)  # a platform admin's save

    form = tenant_admin.get_form(request, read)(
        {"max_gpus_per_user": "4", "drawn": drawn}, instance=read
    )
    assert form.is_valid(), form.errors
    form.save()

    alpha.refresh_from_db()
    assert (alpha.fair_share_weight, alpha.max_gpus_per_user) == (2, 4)
