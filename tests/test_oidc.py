"""Single sign-on spoken by the web app, OpenID Connect's code flow with PKCE, against a real
provider on this machine (tests/oidc_provider.py): a login makes or finds the account the ID
token names and its teams from its groups; an answer that is not the provider's for this login
logs nobody in, and the provider failing is a page saying so, never a 500 (quotas/oidc.py)."""

from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from mlsched_site.middleware import CONTENT_SECURITY_POLICY
from mlsched_site.settings import check_oidc_issuer
from quotas import oidc
from quotas.models import Membership
from tests.factories import TenantFactory, UserFactory
from tests.oidc_provider import START, sign_on, to_provider, who
from tests.processes import free_port
from tests.test_settings import load_settings

pytestmark = pytest.mark.django_db

CALLBACK = "/accounts/oidc/callback/"
LOGIN = "/accounts/login/"
PASSWORD = "right-password-1"


@pytest.fixture(autouse=True)
def nothing_kept(monkeypatch):
    """Each test's provider read afresh: another test's may have had its port."""
    monkeypatch.setattr(oidc, "_fetched", {})


def made(username: str = "alice") -> bool:
    """Whether an account of that name was made."""
    return get_user_model().objects.filter(username=username).exists()


def test_a_first_login_makes_the_account_and_goes_to_the_safe_next(provider):
    browser = Client()

    answer = sign_on(browser, next="/queue/")

    alice = get_user_model().objects.get(username="alice")
    assert answer.status_code == 302 and answer["Location"] == "/queue/"
    assert who(browser) == "alice"
    assert alice.email == "alice@corp.example.com"
    assert not (alice.has_usable_password() or alice.is_staff or alice.is_superuser)


@pytest.mark.parametrize("next", ["https://evil.example.com/", "//evil.example.com/", ""])
def test_a_next_off_the_site_is_ignored_for_the_front_page(provider, next):
    browser = Client()

    answer = sign_on(browser, next=next)

    assert answer.status_code == 302 and answer["Location"] == "/"
    assert who(browser) == "alice"


def test_a_second_login_is_the_same_account_and_takes_the_new_email_address(provider):
    sign_on(Client())
    provider.claims["email"] = "alice@new.example.com"
    browser = Client()

    sign_on(browser)

    assert who(browser) == "alice"
    assert get_user_model().objects.filter(username="alice").count() == 1
    assert get_user_model().objects.get(username="alice").email == "alice@new.example.com"


def sign_on_account(**fields):
    """An account made for sign-on alone, without a usable password."""
    user = UserFactory(**fields)
    user.set_unusable_password()
    user.save()
    return user


def test_an_address_the_provider_has_not_verified_is_not_taken(provider):
    sign_on_account(username="alice", email="alice@corp.example.com")
    provider.claims |= {"email": "mallory@evil.example.com", "email_verified": False}

    sign_on(Client())

    assert get_user_model().objects.get(username="alice").email == "alice@corp.example.com"


def test_a_public_client_names_itself_in_the_token_request(provider, settings):
    provider.client_secret = settings.MLSCHED_OIDC_CLIENT_SECRET = ""
    browser = Client()

    assert sign_on(browser).status_code == 302
    assert who(browser) == "alice"


def test_the_groups_claim_makes_memberships_and_takes_them_away(provider):
    research = TenantFactory(slug="research", member_groups="ml-team\nnlp")
    audit = TenantFactory(slug="audit", viewer_groups="auditors, finance")

    def memberships() -> dict[str, tuple[str, str]]:
        rows = Membership.objects.filter(user__username="alice").select_related("tenant")
        return {m.tenant.slug: (m.role, m.from_group) for m in rows}

    provider.claims["groups"] = ["ml-team", "auditors"]
    sign_on(Client())
    first = memberships()
    provider.claims["groups"] = "nlp"
    sign_on(Client())
    second = memberships()
    provider.claims.pop("groups")
    sign_on(Client())

    assert first == {research.slug: ("member", "ml-team"), audit.slug: ("viewer", "auditors")}
    assert second == {research.slug: ("member", "nlp")}
    assert memberships() == {}


def test_an_admin_group_in_the_claim_makes_a_platform_admin_until_it_is_gone(provider, settings):
    settings.MLSCHED_AUTH_ADMIN_GROUPS = "platform-ops"
    provider.claims["groups"] = ["platform-ops"]
    sign_on(Client())
    made = get_user_model().objects.get(username="alice").is_superuser
    provider.claims["groups"] = []

    sign_on(Client())

    assert made is True
    assert get_user_model().objects.get(username="alice").is_superuser is False


def test_without_a_groups_claim_set_memberships_are_left_alone(provider, settings):
    settings.MLSCHED_OIDC_GROUPS_CLAIM = ""
    TenantFactory(slug="research", member_groups="ml-team")
    provider.claims["groups"] = ["ml-team"]

    sign_on(Client())

    assert not Membership.objects.filter(user__username="alice").exists()


@pytest.mark.parametrize("state", [None, "not-the-sessions"])
def test_a_callback_without_the_sessions_state_is_a_400_and_logs_nobody_in(provider, state):
    browser = Client()
    back = urlsplit(to_provider(browser))
    query = {k: v[0] for k, v in parse_qs(back.query).items() if k != "state"}
    if state:
        query["state"] = state

    answer = browser.get(CALLBACK, query)

    assert answer.status_code == 400
    assert "not started in this browser" in answer.text
    assert who(browser) is None and not made()


def test_a_callback_from_another_browser_is_refused(provider):
    back = to_provider(Client())
    other = Client()

    assert other.get(back).status_code == 400
    assert who(other) is None and not made()


def test_a_callback_replayed_is_refused(provider):
    browser = Client()
    back = to_provider(browser)

    first, again = browser.get(back), browser.get(back)

    assert (first.status_code, again.status_code) == (302, 400)


def test_logins_started_in_several_tabs_each_come_back(provider):
    browser = Client()
    first, second = to_provider(browser, next="/queue/"), to_provider(browser, next="/jobs/")

    later, earlier = browser.get(second), browser.get(first)

    assert (later.status_code, later["Location"]) == (302, "/jobs/")
    assert (earlier.status_code, earlier["Location"]) == (302, "/queue/")
    assert who(browser) == "alice"


def test_only_the_last_five_logins_of_a_session_are_kept_pending(provider):
    browser = Client()
    backs = [to_provider(browser) for _ in range(oidc.MAX_PENDING + 1)]

    assert browser.get(backs[1]).status_code == 302
    assert browser.get(backs[0]).status_code == 400


def test_a_login_pending_as_an_earlier_release_kept_it_is_refused_not_a_500(provider):
    browser = Client()
    back = to_provider(browser)
    session = browser.session
    [pending] = session[oidc.PENDING].values()
    session[oidc.PENDING] = pending  # one login, not a dict of them
    session.save()

    assert browser.get(back).status_code == 400
    assert sign_on(browser).status_code == 302


def test_a_callback_refused_spends_the_pending_login(provider):
    browser = Client()
    back = to_provider(browser)
    forged = back.replace("state=", "state=forged")

    refused, then = browser.get(forged), browser.get(back)

    assert (refused.status_code, then.status_code) == (400, 400)
    assert who(browser) is None and not made()


BAD_TOKENS = {
    "signed with a key the provider does not publish": {"sign": "other key"},
    "for another client": {"token": {"aud": "another-client"}},
    "from another issuer": {"token": {"iss": "https://evil.example.com"}},
    "expired": {"token": {"iat": 1_700_000_000, "exp": 1_700_000_300}},
    "issued in the future": {"token": {"iat": 4_000_000_000, "exp": 4_000_000_300}},
    "for another login": {"token": {"nonce": "another-login"}},
    "authorized for another client": {"token": {"aud": ["mlsched-portal", "x"], "azp": "x"}},
    "unsigned, though the provider lists none": {"sign": "none", "algorithms": ["RS256", "none"]},
    "keyed with the client secret": {"sign": "HS256", "algorithms": ["RS256", "HS256"]},
}


@pytest.mark.parametrize("knobs", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_an_id_token_that_does_not_hold_logs_nobody_in(provider, knobs, caplog):
    for knob, value in knobs.items():
        setattr(provider, knob, value)
    browser = Client()

    answer = sign_on(browser)

    assert answer.status_code == 403
    assert "Signing in with Corp SSO failed." in answer.text
    assert who(browser) is None and not made()
    assert "OpenID Connect sign-on failed: the ID token" in caplog.text


def test_a_key_the_provider_rotated_in_is_fetched(provider):
    sign_on(Client())
    provider.rotate()
    browser = Client()

    assert sign_on(browser).status_code == 302
    assert who(browser) == "alice"


def test_the_providers_refusal_is_said_on_the_login_page(provider):
    provider.error = "access_denied"
    browser = Client()

    answer = sign_on(browser)

    assert answer.status_code == 403
    assert "Corp SSO refused the sign-on: The user said no." in answer.text
    assert who(browser) is None


def test_the_token_endpoint_failing_is_a_502_page(provider):
    provider.token_status = 500
    browser = Client()

    answer = sign_on(browser)

    assert answer.status_code == 502
    assert "Signing in with Corp SSO failed." in answer.text
    assert who(browser) is None and not made()


def test_the_provider_gone_at_the_callback_is_a_502_page(provider):
    browser = Client()
    back = to_provider(browser)
    provider.stop()

    answer = browser.get(back)

    assert answer.status_code == 502
    assert who(browser) is None


def test_a_discovery_document_of_another_issuer_is_refused(provider, settings):
    settings.MLSCHED_OIDC_ISSUER = f"{provider.issuer}/"  # the document says it without "/"

    answer = Client().get(START)

    assert answer.status_code == 502
    assert "Signing in with Corp SSO failed." in answer.text


def test_a_provider_out_of_reach_is_a_502_page_at_the_start(settings):
    settings.MLSCHED_OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"
    settings.MLSCHED_OIDC_CLIENT_ID = "mlsched-portal"

    answer = Client().get(START)

    assert answer.status_code == 502
    assert "Signing in with single sign-on failed." in answer.text


@pytest.mark.parametrize("name", ["alice smith", "x" * 151, "<script>"])
def test_a_name_that_is_no_username_logs_nobody_in(provider, name):
    provider.claims["preferred_username"] = name
    browser = Client()

    answer = sign_on(browser)

    assert answer.status_code == 403
    assert "has no name this portal takes" in answer.text
    assert who(browser) is None and not made(name)


def test_the_username_claim_is_the_configured_one(provider, settings):
    settings.MLSCHED_OIDC_USERNAME_CLAIM = "email"
    browser = Client()

    sign_on(browser)

    assert who(browser) == "alice@corp.example.com"


def test_an_inactive_account_is_not_logged_in(provider):
    sign_on_account(username="alice", is_active=False)
    browser = Client()

    answer = sign_on(browser)

    assert answer.status_code == 403
    assert who(browser) is None


def test_without_account_making_an_unknown_user_is_refused(provider, settings):
    settings.MLSCHED_AUTH_CREATES_USERS = False
    browser = Client()

    answer = sign_on(browser)

    assert answer.status_code == 403
    assert who(browser) is None and not made()


def test_without_account_making_an_existing_account_logs_in(provider, settings):
    settings.MLSCHED_AUTH_CREATES_USERS = False
    sign_on_account(username="alice")
    browser = Client()

    sign_on(browser)

    assert who(browser) == "alice"


def test_a_password_account_of_the_providers_name_is_not_taken_over(provider):
    UserFactory(username="alice", is_superuser=True, is_staff=True)
    browser = Client()

    answer = sign_on(browser)

    assert answer.status_code == 403
    assert who(browser) is None


def test_with_sign_on_off_its_pages_are_404s_and_the_login_page_has_no_link(client):
    page = client.get(LOGIN)

    assert client.get(START).status_code == 404
    assert client.get(CALLBACK, {"state": "x", "code": "y"}).status_code == 404
    assert page.status_code == 200 and "Sign in with" not in page.text


def test_with_sign_on_on_the_login_page_links_to_it_with_its_name(provider, client):
    page = client.get(LOGIN, {"next": "/queue/?state=running"})

    assert 'href="/accounts/oidc/login/?next=/queue/%3Fstate%3Drunning"' in page.text
    assert "Sign in with Corp SSO" in page.text
    assert 'name="password"' in page.text


def test_a_password_login_still_works_with_sign_on_on(provider):
    admin = UserFactory(username="root-admin")
    admin.set_password(PASSWORD)
    admin.save()
    browser = Client()

    answer = browser.post(LOGIN, {"username": "root-admin", "password": PASSWORD})

    assert answer.status_code == 302
    assert who(browser) == "root-admin"


def test_logging_out_of_a_sign_on_session_ends_it_at_the_provider(provider):
    browser = Client()
    sign_on(browser)

    out = browser.post("/accounts/logout/")

    location = urlsplit(out["Location"])
    query = {k: v[0] for k, v in parse_qs(location.query).items()}
    assert out.status_code == 302
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{provider.issuer}/logout"
    assert query["id_token_hint"].count(".") == 2
    assert query["post_logout_redirect_uri"] == "http://testserver/"
    assert query["client_id"] == provider.client_id
    assert who(browser) is None


@pytest.mark.parametrize("logout_url", [None, "https://elsewhere.example.com/logout"])
def test_logging_out_without_an_end_session_endpoint_on_its_origin_stays_on_the_portal(
    provider, logout_url
):
    provider.logout_url = logout_url
    browser = Client()
    sign_on(browser)

    out = browser.post("/accounts/logout/")

    assert out.status_code == 302 and out["Location"] == "/"
    assert who(browser) is None


def test_the_portals_forms_may_go_on_to_the_providers_origin_alone(provider, client):
    page = client.get(LOGIN)

    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY.replace(
        "form-action 'self'", f"form-action 'self' {provider.issuer}"
    )


def test_logging_out_of_a_password_session_is_as_before(provider):
    admin = UserFactory(username="root-admin")
    browser = Client()
    browser.force_login(admin)

    out = browser.post("/accounts/logout/")

    assert out.status_code == 302 and out["Location"] == "/"
    assert who(browser) is None


@pytest.mark.parametrize(
    "env, refusal",
    [
        ({"MLSCHED_OIDC_ISSUER": "https://sso.example.com"}, "MLSCHED_OIDC_CLIENT_ID must be set"),
        (
            {"MLSCHED_OIDC_ISSUER": "http://sso.example.com", "MLSCHED_OIDC_CLIENT_ID": "c"},
            "MLSCHED_OIDC_ISSUER: 'http://sso.example.com' is no https URL",
        ),
    ],
)
def test_the_server_refuses_to_start_with_an_issuer_it_cannot_use(env, refusal):
    run = load_settings(**env)

    assert run.returncode != 0
    assert refusal in run.stderr


@pytest.mark.parametrize("issuer", ["https://sso.example.com/realms/ml", "http://localhost:8080",
                                    "http://127.0.0.1:5556/dex"])  # fmt: skip
def test_an_https_issuer_or_one_on_this_machine_is_taken(issuer):
    check_oidc_issuer(issuer, "mlsched-portal")
