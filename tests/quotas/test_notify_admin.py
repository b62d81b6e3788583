"""A tenant's job-end notifications in the admin: a platform admin sets where they go and sees
the secret they are signed with; a tenant admin can change neither, and never sees the secret
(an outbound request from the control plane to any address is the platform's decision)."""

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from quotas.models import Tenant
from tests.factories import TenantFactory, UserFactory
from tests.quotas.tenant_form import tenant_fields

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example.com/services/T000/B000/XXXX"


@pytest.fixture
def admin_client(client, db):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def tenant_admin(client, alice):
    """Alice, owner of alpha, as staff holding every permission on tenants."""
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    codenames = ["view_tenant", "change_tenant", "add_tenant", "delete_tenant"]
    alice.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(alice)
    return client


def tenant_form(tenant, **fields) -> dict:
    """The tenant change form, no quota or member rows changed."""
    return {
        **tenant_fields(tenant, **fields),
        "quotas-TOTAL_FORMS": "0", "quotas-INITIAL_FORMS": "0",
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip


def change_page(tenant) -> str:
    return f"/admin/quotas/tenant/{tenant.pk}/change/"


def test_a_platform_admin_sets_the_notification_url(admin_client, alpha):
    page = admin_client.post(change_page(alpha), tenant_form(alpha, notify_url=HOOK))

    assert page.status_code == 302
    alpha.refresh_from_db()
    assert alpha.notify_url == HOOK


def test_a_platform_admin_sees_the_secret_on_the_tenant_page(admin_client, alpha):
    page = admin_client.get(change_page(alpha))

    assert page.status_code == 200
    assert alpha.notify_secret in page.text
    assert 'name="notify_url"' in page.text
    assert 'name="notify_secret"' not in page.text  # generated, never typed in


@pytest.mark.parametrize(
    "url",
    ["ftp://files.example.com/hook", "javascript:alert(1)", "file:///etc/passwd", "https://",
     "https://hooks.example.com/" + "x" * 480],
)  # fmt: skip
def test_a_url_not_http_or_https_or_too_long_is_refused(admin_client, alpha, url):
    page = admin_client.post(change_page(alpha), tenant_form(alpha, notify_url=url))

    assert page.status_code == 200
    assert "errorlist" in page.text
    alpha.refresh_from_db()
    assert alpha.notify_url == ""


def test_an_address_typed_without_a_scheme_is_taken_as_https(admin_client, alpha):
    admin_client.post(change_page(alpha), tenant_form(alpha, notify_url="hooks.example.com/x"))

    alpha.refresh_from_db()
    assert alpha.notify_url == "https://hooks.example.com/x"


def test_a_url_carrying_credentials_is_allowed(admin_client, alpha):
    url = "https://user:pass@hooks.example.com/hook"

    admin_client.post(change_page(alpha), tenant_form(alpha, notify_url=url))

    alpha.refresh_from_db()
    assert alpha.notify_url == url


def test_a_platform_admin_removes_the_url(admin_client, alpha):
    Tenant.objects.filter(pk=alpha.pk).update(notify_url=HOOK)

    admin_client.post(change_page(alpha), tenant_form(alpha, notify_url=""))

    alpha.refresh_from_db()
    assert alpha.notify_url == ""


def test_every_tenant_gets_a_secret_of_its_own(db):
    one, other = TenantFactory(), TenantFactory()

    assert re.fullmatch(r"[0-9a-f]{64}", one.notify_secret)
    assert one.notify_secret != other.notify_secret


def test_a_platform_admin_gives_a_tenant_a_new_secret(admin_client, alpha, gamma):
    before = {t.pk: t.notify_secret for t in (alpha, gamma)}
    form = {"action": "rotate_notify_secret", "_selected_action": [alpha.pk]}

    page = admin_client.post("/admin/quotas/tenant/", form)

    assert page.status_code == 302
    alpha.refresh_from_db()
    gamma.refresh_from_db()
    assert alpha.notify_secret != before[alpha.pk]
    assert gamma.notify_secret == before[gamma.pk]
    entry = LogEntry.objects.get(object_id=str(alpha.pk))
    assert (entry.user.username, entry.change_message) == (
        "root",
        "Gave it a new notification secret",
    )


def test_a_tenant_admin_cannot_set_the_url_nor_the_secret(tenant_admin, alpha):
    secret = alpha.notify_secret
    form = tenant_form(alpha, notify_url=HOOK, notify_secret="0" * 64)

    tenant_admin.post(change_page(alpha), form)

    alpha.refresh_from_db()
    assert (alpha.notify_url, alpha.notify_secret) == ("", secret)


def test_a_tenant_admin_sees_the_url_but_never_the_secret(tenant_admin, alpha):
    Tenant.objects.filter(pk=alpha.pk).update(notify_url=HOOK)

    page = tenant_admin.get(change_page(alpha))

    assert page.status_code == 200
    assert HOOK in page.text
    assert 'name="notify_url"' not in page.text
    assert alpha.notify_secret not in page.text


def test_a_tenant_admin_cannot_give_their_tenant_a_new_secret(tenant_admin, alpha):
    secret = alpha.notify_secret
    form = {"action": "rotate_notify_secret", "_selected_action": [alpha.pk]}

    listing = tenant_admin.get("/admin/quotas/tenant/")
    tenant_admin.post("/admin/quotas/tenant/", form)

    assert "rotate_notify_secret" not in listing.text
    alpha.refresh_from_db()
    assert alpha.notify_secret == secret


BEFORE = [("quotas", "0007_quota_flavor_of_any_gpu_type")]
AFTER = [("quotas", "0008_tenant_notify")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("latest_migrations_after")
def test_the_migration_gives_each_existing_tenant_a_secret_of_its_own():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("quotas", "Tenant")
    old.objects.create(name="One", slug="one")
    old.objects.create(name="Two", slug="two")

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    secrets = list(Tenant.objects.values_list("notify_secret", flat=True))
    assert len(set(secrets)) == 2
    assert all(re.fullmatch(r"[0-9a-f]{64}", secret) for secret in secrets)
    assert set(Tenant.objects.values_list("notify_url", flat=True)) == {""}


def test_a_tenant_written_without_the_notify_columns_has_no_url_and_a_secret_at_first_use(db):
    # As a process that does not know the columns yet (a rolling upgrade) writes a tenant.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO quotas_tenant (name, slug, fair_share_weight, cohort, created) "
            "VALUES ('Old', 'old', 1, 'default', now()) RETURNING id"
        )
        (pk,) = cursor.fetchone()
    tenant = Tenant.objects.get(pk=pk)

    assert (tenant.notify_url, tenant.notify_secret) == ("", "")
    secret = tenant.signing_secret()
    assert re.fullmatch(r"[0-9a-f]{64}", secret)
    assert Tenant.objects.get(pk=pk).notify_secret == secret == tenant.signing_secret()
