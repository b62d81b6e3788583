"""Sessions OpenID Connect signed in follow the provider's (quotas/oidc_sessions.py), against a
real provider on this machine (tests/oidc_provider.py): checked again by their refresh token
once due, logged out once the provider refuses it, following the user's new groups; ended by
the provider's back-channel logout, whose token must hold."""

import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from quotas import oidc, oidc_sessions, vault
from quotas.models import Membership, OidcSession
from tests.factories import TenantFactory
from tests.oidc_provider import sign_on, who
from tests.test_settings import load_settings

pytestmark = pytest.mark.django_db

BACKCHANNEL = "/accounts/oidc/backchannel-logout/"


def signed_on(provider) -> Client:
    """A browser signed on as the provider's user."""
    browser = Client()
    assert sign_on(browser).status_code == 302
    assert who(browser) == provider.claims["preferred_username"]
    return browser


def row(browser: Client) -> OidcSession:
    return OidcSession.objects.get(session_key=browser.session.session_key)


def due(browser: Client) -> None:
    """Make the browser's session due for its check, in its row and in the session."""
    OidcSession.objects.filter(session_key=browser.session.session_key).update(
        recheck_at=timezone.now() - timedelta(seconds=1)
    )
    session = browser.session
    session[oidc.RECHECK_AT] = 0
    session.save()


def test_a_sign_on_keeps_its_session_with_the_providers_and_a_sealed_refresh_token(provider):
    before = timezone.now()

    browser = signed_on(provider)

    kept = row(browser)
    [(refresh_token, sid)] = provider.sessions.items()
    assert (kept.user.username, kept.subject, kept.sid) == ("alice", "u-1", sid)
    assert refresh_token not in kept.refresh_token
    assert vault.unseal(kept.refresh_token) == refresh_token
    assert (
        before + timedelta(seconds=299) < kept.recheck_at < timezone.now() + timedelta(seconds=301)
    )


def test_a_session_not_due_is_not_checked(provider):
    browser = signed_on(provider)
    provider.end_sessions()

    for _ in range(3):
        assert who(browser) == "alice"

    assert provider.refreshes == 0


def test_a_session_the_provider_ended_is_logged_out_at_its_check(provider):
    browser = signed_on(provider)
    provider.end_sessions()
    due(browser)

    assert who(browser) is None
    assert browser.get("/queue/").status_code == 302
    assert not OidcSession.objects.exists()


def test_a_session_due_is_refreshed_and_next_checked_later_with_the_new_token(provider):
    browser = signed_on(provider)
    first = vault.unseal(row(browser).refresh_token)
    due(browser)

    assert who(browser) == "alice"

    kept = row(browser)
    assert provider.refreshes == 1
    assert vault.unseal(kept.refresh_token) != first
    assert vault.unseal(kept.refresh_token) in provider.sessions
    assert kept.recheck_at > timezone.now() + timedelta(seconds=290)
    assert who(browser) == "alice" and provider.refreshes == 1


def test_a_refresh_follows_the_users_new_groups_and_address(provider):
    research = TenantFactory(slug="research", member_groups="ml-team")
    audit = TenantFactory(slug="audit", viewer_groups="auditors")
    provider.claims["groups"] = ["ml-team"]
    browser = signed_on(provider)
    alice = get_user_model().objects.get(username="alice")
    assert Membership.objects.get(user=alice).tenant == research

    provider.claims |= {"groups": ["auditors"], "email": "alice@new.example.com"}
    due(browser)
    assert who(browser) == "alice"

    [membership] = Membership.objects.filter(user=alice)
    assert (membership.tenant, membership.role) == (audit, Membership.Role.VIEWER)
    alice.refresh_from_db()
    assert alice.email == "alice@new.example.com"


def test_a_refresh_taking_the_admin_group_away_unmakes_the_platform_admin(provider, settings):
    settings.MLSCHED_AUTH_ADMIN_GROUPS = "platform-ops"
    provider.claims["groups"] = ["platform-ops"]
    browser = signed_on(provider)
    assert get_user_model().objects.get(username="alice").is_superuser

    provider.claims["groups"] = []
    due(browser)
    who(browser)

    assert not get_user_model().objects.get(username="alice").is_superuser


@pytest.mark.parametrize(
    "refreshed", [{"sub": "u-2"}, {"preferred_username": "bob"}, {"aud": "another-client"}]
)
def test_a_refreshed_id_token_of_someone_else_or_not_for_us_logs_out(provider, refreshed):
    browser = signed_on(provider)
    provider.refreshed = refreshed
    due(browser)

    assert who(browser) is None
    assert not get_user_model().objects.filter(username="bob").exists()


def test_the_provider_failing_keeps_the_session_and_asks_again_a_minute_later(provider):
    browser = signed_on(provider)
    provider.refresh_status = 503
    due(browser)

    assert who(browser) == "alice"
    retry = row(browser).recheck_at
    assert timezone.now() + timedelta(seconds=50) < retry < timezone.now() + timedelta(seconds=61)

    provider.refresh_status = 200
    due(browser)
    assert who(browser) == "alice" and provider.refreshes == 1


def test_the_provider_out_of_reach_keeps_the_session(provider):
    browser = signed_on(provider)
    oidc.discovery()  # kept: the token endpoint alone goes
    provider.stop()
    due(browser)

    assert who(browser) == "alice"


def test_a_check_another_request_has_claimed_is_left_to_it(provider):
    browser = signed_on(provider)
    due(browser)
    # Another request of the session claimed the check and is at the provider.
    OidcSession.objects.update(recheck_at=timezone.now() + timedelta(seconds=60))
    provider.end_sessions()

    assert who(browser) == "alice"
    assert provider.refreshes == 0
    assert browser.session[oidc.RECHECK_AT] > time.time() + 50


def test_without_a_refresh_token_the_session_is_never_checked(provider):
    provider.gives_refresh = False
    browser = signed_on(provider)

    assert row(browser).recheck_at is None
    session = browser.session
    session[oidc.RECHECK_AT] = 0  # even with a session saying otherwise, its row decides
    session.save()
    assert who(browser) == "alice" and provider.refreshes == 0


def test_with_checks_off_no_session_is_checked(provider, settings):
    settings.MLSCHED_OIDC_RECHECK_S = 0
    browser = signed_on(provider)
    provider.end_sessions()
    due(browser)

    assert who(browser) == "alice" and provider.refreshes == 0


def test_a_session_of_sign_on_without_its_row_is_logged_out_when_due(provider):
    browser = signed_on(provider)
    due(browser)
    OidcSession.objects.all().delete()

    assert who(browser) is None


def test_a_password_session_is_never_checked(provider, client, django_user_model):
    django_user_model.objects.create_user("carol", password="right-password-1")
    client.login(username="carol", password="right-password-1")
    provider.stop()

    assert who(client) == "carol"


def test_logging_out_forgets_the_sessions_row(provider):
    browser = signed_on(provider)
    provider.logout_url = None

    browser.post("/accounts/logout/")

    assert who(browser) is None
    assert not OidcSession.objects.exists()


def test_a_sign_on_clears_the_users_rows_of_sessions_the_store_no_longer_has(provider):
    expired, live = signed_on(provider), signed_on(provider)
    Session.objects.filter(session_key=expired.session.session_key).delete()  # expired, cleared

    kept = signed_on(provider)

    assert set(OidcSession.objects.values_list("session_key", flat=True)) == {
        live.session.session_key,
        kept.session.session_key,
    }


def backchannel(provider, **claims):
    return Client().post(BACKCHANNEL, {"logout_token": provider.logout_token(**claims)})


def test_a_logout_token_naming_a_sid_ends_that_session_alone(provider):
    first, second = signed_on(provider), signed_on(provider)

    answer = backchannel(provider, sid=row(first).sid)

    assert answer.status_code == 200 and answer["Cache-Control"] == "no-store"
    assert who(first) is None
    assert who(second) == "alice"


def test_a_logout_token_naming_the_sub_alone_ends_all_its_sessions(provider):
    first, second = signed_on(provider), signed_on(provider)
    provider.claims |= {"sub": "u-9", "preferred_username": "bob"}
    bobs = signed_on(provider)

    assert backchannel(provider, sub="u-1").status_code == 200

    assert who(first) is None and who(second) is None
    assert who(bobs) == "bob"


def test_a_logout_token_of_a_sid_of_another_sub_ends_nothing(provider):
    browser = signed_on(provider)

    assert backchannel(provider, sub="u-2", sid=row(browser).sid).status_code == 200

    assert who(browser) == "alice"


@pytest.mark.parametrize(
    "claims, why",
    [
        ({"events": None}, "no back-channel logout event"),
        ({"events": {"http://schemas.openid.net/event/backchannel-logout": "yes"}}, "event"),
        ({"nonce": "n"}, "has a nonce"),
        ({"sub": None}, "neither a sub nor a sid"),
        ({"aud": "another-client"}, "Audience"),
        ({"iss": "https://evil.example.com"}, "issuer"),
        ({"iat": None}, "iat"),
        ({"iat": int(time.time()) - 3600}, "over 600 s ago"),
        ({"exp": int(time.time()) - 3600}, "expired"),
    ],
)
def test_a_logout_token_that_does_not_hold_is_a_400_and_ends_nothing(provider, claims, why):
    browser = signed_on(provider)

    answer = backchannel(provider, **claims)

    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_request"
    assert why in answer.json()["error_description"]
    assert who(browser) == "alice"


@pytest.mark.parametrize("sign", ["other key", "none", "HS256"])
def test_a_logout_token_not_signed_by_the_provider_is_a_400(provider, sign):
    browser = signed_on(provider)
    provider.sign = sign

    assert backchannel(provider).status_code == 400
    assert who(browser) == "alice"


def test_a_logout_token_used_again_is_refused(provider):
    token = provider.logout_token()
    assert Client().post(BACKCHANNEL, {"logout_token": token}).status_code == 200
    browser = signed_on(provider)

    again = Client().post(BACKCHANNEL, {"logout_token": token})

    assert again.status_code == 400 and "used already" in again.json()["error_description"]
    assert who(browser) == "alice"


def test_a_post_without_a_token_is_a_400_and_a_get_a_405(provider):
    assert Client().post(BACKCHANNEL, {}).status_code == 400
    assert Client().get(BACKCHANNEL).status_code == 405


def test_the_providers_keys_out_of_reach_is_a_502(provider):
    token = provider.logout_token()
    oidc_sessions.oidc._fetched.clear()
    provider.stop()

    assert Client().post(BACKCHANNEL, {"logout_token": token}).status_code == 502


def test_with_sign_on_off_the_back_channel_is_a_404(client):
    assert client.post(BACKCHANNEL, {"logout_token": "x"}).status_code == 404


@pytest.mark.parametrize("written", ["-1", "soon"])
def test_the_server_refuses_a_recheck_that_is_no_number_of_seconds(written):
    run = load_settings(MLSCHED_OIDC_RECHECK_S=written)

    assert run.returncode != 0
    assert "MLSCHED_OIDC_RECHECK_S" in run.stderr
