"""Personal API tokens: created in the portal (the key shown once, only its hash stored), used
by the API and the CLI, revoked by their user or a platform admin."""

import hashlib
import importlib
import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from quotas.models import ApiToken
from quotas.tokens import MAX_TOKENS_PER_USER, create_token
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def api_call(key: str):
    return APIClient().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}")


def shown_key(page) -> str:
    return re.search(r'id="new-token" readonly value="([^"]+)"', page.text)[1]


def test_creating_a_token_shows_its_key_once_and_stores_only_its_hash(client, alice):
    client.force_login(alice)

    created = client.post("/tokens/", {"name": "laptop", "expires": ""})
    key = shown_key(created)
    again = client.get("/tokens/")

    token = ApiToken.objects.get(user=alice)
    assert created.status_code == 200
    assert key.startswith("mls_") and len(key) > 40
    assert f"MLSCHED_TOKEN={key} python3 mlsched.pyz" in created.text
    assert "no-store" in created["Cache-Control"]
    assert (token.name, token.prefix) == ("laptop", key[:12])
    assert token.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert not any(key in str(value) for value in ApiToken.objects.values().get().values())
    assert key not in again.text
    assert key[:12] in again.text  # listed by its prefix


def test_a_tokens_key_authenticates_api_calls_as_its_user(alice):
    _, key = create_token(alice, "ci")

    response = api_call(key)

    assert response.status_code == 200
    assert response.wsgi_request.user == alice


@pytest.mark.parametrize("key", ["mls_not-a-token", "5a57087cb92cc7eba35a23b33364099635cfe3ea"])
def test_an_unknown_key_is_a_401_asking_for_a_token(db, key):
    response = api_call(key)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_a_revoked_token_is_a_401(client, alice):
    token, key = create_token(alice, "ci")
    client.force_login(alice)

    revoked = client.post(f"/tokens/{token.pk}/revoke/")

    assert revoked.status_code == 302
    assert not ApiToken.objects.exists()
    assert api_call(key).status_code == 401


def test_an_expired_token_is_a_401(alice):
    _, key = create_token(alice, "ci", 30, now=timezone.now() - timedelta(days=31))

    assert api_call(key).status_code == 401


def test_an_inactive_users_token_is_a_401(alice):
    _, key = create_token(alice, "ci")
    alice.is_active = False
    alice.save()

    assert api_call(key).status_code == 401


def test_last_used_is_recorded_at_most_once_a_minute(alice):
    token, key = create_token(alice, "ci")

    api_call(key)
    token.refresh_from_db()
    first = token.last_used
    with CaptureQueriesContext(connection) as queries:
        api_call(key)
    token.refresh_from_db()
    second = token.last_used
    ApiToken.objects.filter(pk=token.pk).update(last_used=first - timedelta(minutes=2))
    api_call(key)
    token.refresh_from_db()

    assert first is not None
    assert second == first
    assert not [q for q in queries if q["sql"].startswith('UPDATE "quotas_apitoken"')]
    assert token.last_used > first


def test_the_page_lists_the_users_own_tokens_only(client, alice, bob):
    create_token(alice, "alice-laptop")
    create_token(bob, "bob-laptop")
    client.force_login(bob)

    page = client.get("/tokens/")

    assert page.status_code == 200
    assert "bob-laptop" in page.text
    assert "alice-laptop" not in page.text


def test_another_users_token_cannot_be_revoked(client, alice, charlie):
    token, key = create_token(alice, "ci")
    client.force_login(charlie)

    response = client.post(f"/tokens/{token.pk}/revoke/")

    assert response.status_code == 404
    assert api_call(key).status_code == 200


def test_revoking_takes_a_post(client, alice):
    token, _ = create_token(alice, "ci")
    client.force_login(alice)

    assert client.get(f"/tokens/{token.pk}/revoke/").status_code == 405
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_a_visitor_is_sent_to_log_in_for_the_tokens_page(client, db):
    page = client.get("/tokens/")

    assert page.status_code == 302
    assert page.url.startswith("/accounts/login/")


def test_the_menu_links_to_the_tokens_page(client, alice):
    client.force_login(alice)

    assert 'href="/tokens/"' in client.get("/").text


@pytest.mark.parametrize("name", ["", "   ", "x" * 101, "tab\tname"])
def test_a_bad_name_is_a_form_error_naming_the_field(client, alice, name):
    client.force_login(alice)

    page = client.post("/tokens/", {"name": name, "expires": ""})

    assert page.status_code == 400
    assert 'data-field="name"' in page.text
    assert not ApiToken.objects.exists()


def test_a_nul_in_the_name_is_a_400_naming_it_before_the_page_reads_it(client, alice):
    client.force_login(alice)

    answer = client.post("/tokens/", {"name": "bad\x00name", "expires": ""})

    assert (answer.status_code, answer.json()) == (
        400, {"name": ["Cannot contain a NUL character."]}
    )  # fmt: skip
    assert not ApiToken.objects.exists()


def test_a_bad_expiry_is_a_form_error_naming_the_field(client, alice):
    client.force_login(alice)

    page = client.post("/tokens/", {"name": "ci", "expires": "9999"})

    assert page.status_code == 400
    assert 'data-field="expires"' in page.text
    assert not ApiToken.objects.exists()


def test_a_token_may_be_made_to_expire(client, alice):
    client.force_login(alice)

    client.post("/tokens/", {"name": "ci", "expires": "30"})

    expires = ApiToken.objects.get().expires
    assert timedelta(days=29) < expires - timezone.now() <= timedelta(days=30)


def test_a_user_holds_at_most_fifty_tokens(client, alice):
    for i in range(MAX_TOKENS_PER_USER):
        create_token(alice, f"token-{i}")
    client.force_login(alice)

    page = client.post("/tokens/", {"name": "one more", "expires": ""})

    assert page.status_code == 400
    assert 'data-field="tokens"' in page.text
    assert ApiToken.objects.count() == MAX_TOKENS_PER_USER


carry_over = importlib.import_module("quotas.migrations.0005_carry_over_authtokens")


def test_the_migration_carries_an_old_authtoken_key_over_and_deletes_it(alice):
    old_key = "5a57087cb92cc7eba35a23b33364099635cfe3ea"
    with connection.cursor() as cursor:  # DRF's table, as an existing database has it
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "created timestamp with time zone NOT NULL, user_id integer NOT NULL)"
        )
        cursor.execute(
            "INSERT INTO authtoken_token VALUES (%s, %s, %s)",
            [old_key, timezone.now() - timedelta(days=400), alice.pk],
        )

    with connection.schema_editor() as editor:
        carry_over.carry_over_authtokens(apps, editor)

    token = ApiToken.objects.get(user=alice)
    assert (token.name, token.prefix) == ("migrated", old_key[:12])
    assert token.created < timezone.now() - timedelta(days=399)  # kept
    assert api_call(old_key).status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0


def test_the_migration_does_nothing_on_a_database_that_never_had_old_tokens(alice):
    with connection.schema_editor() as editor:
        carry_over.carry_over_authtokens(apps, editor)

    assert not ApiToken.objects.exists()


@pytest.fixture
def platform_admin(client, db):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_platform_admins_list_tokens_but_never_their_hash(platform_admin, alice):
    token, key = create_token(alice, "alice-laptop")

    listing = platform_admin.get("/admin/quotas/apitoken/")
    detail = platform_admin.get(f"/admin/quotas/apitoken/{token.pk}/change/")

    assert listing.status_code == detail.status_code == 200
    assert "alice-laptop" in listing.text and token.prefix in listing.text
    for page in (listing, detail):
        assert token.key_hash not in page.text
        assert key not in page.text


def test_platform_admins_revoke_any_users_token(platform_admin, alice, charlie):
    token, key = create_token(alice, "ci")
    kept, _ = create_token(charlie, "ci")

    platform_admin.post(
        "/admin/quotas/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}
    )

    assert list(ApiToken.objects.all()) == [kept]
    assert api_call(key).status_code == 401


def test_tokens_cannot_be_added_in_the_admin(platform_admin):
    assert platform_admin.get("/admin/quotas/apitoken/add/").status_code == 403


def test_tenant_admins_see_no_tokens(client, alice, bob):
    token, _ = create_token(bob, "bob-laptop")
    alice.is_staff = True  # owner of alpha: its tenant admin
    alice.save()
    alice.user_permissions.add(*Permission.objects.filter(codename__endswith="_apitoken"))
    client.force_login(alice)

    listing = client.get("/admin/quotas/apitoken/")
    detail = client.get(f"/admin/quotas/apitoken/{token.pk}/change/")
    index = client.get("/admin/")

    assert listing.status_code == detail.status_code == 403
    assert "API tokens" not in index.text


def test_the_tokens_page_says_its_times_are_utc(client, alice):
    client.force_login(alice)

    page = client.get("/tokens/").text

    assert "<th>Created (UTC)</th><th>Last used (UTC)</th><th>Expires (UTC)</th>" in page
