"""What the admin tests of tenants' rows do through the admin's pages."""

from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.test import Client

from tests.security.test_admin_scope import GRANTED


def staff_client(user, rights) -> Client:
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.user_permissions.add(*Permission.objects.filter(codename__in=rights))
    client = Client()
    client.force_login(user)
    return client


def tenant_admin_of(user, model: str) -> Client:
    """The user (their tenants' owner) as staff holding every model permission the admin asks
    for, and every right on the model's rows (`tenantsecret`)."""
    rights = [f"{verb}_{model}" for verb in ("view", "add", "change", "delete")]
    return staff_client(user, [*GRANTED, *rights])


def said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def delete_selected(client, listing: str, rows) -> list[str]:
    """Django's bulk "Delete selected" on the rows: its confirmation page, then the deletion
    confirmed; the messages the admin is shown."""
    selection = {"action": "delete_selected", "_selected_action": [row.pk for row in rows]}
    confirm = client.post(listing, selection)
    assert confirm.status_code == 200 and "Are you sure" in confirm.text
    return said(client.post(listing, {**selection, "post": "yes"}))
