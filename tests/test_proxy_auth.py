"""Single sign-on through an authenticating proxy: the header it names the signed-in user in
logs them in, their account made at the first visit with the proxy's email address; a session
it logged in ends without it; a peer outside the proxy's networks is not believed
(quotas/proxy_auth.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent
ME = "/api/v1/me/"


@pytest.fixture
def proxy(settings):
    settings.MLSCHED_AUTH_USER_HEADER = "X-Auth-Request-User"
    settings.MLSCHED_AUTH_EMAIL_HEADER = "X-Auth-Request-Email"
    return settings


def signed(user="alice", email=None, address="127.0.0.1", **more) -> Client:
    """A browser behind the proxy, which names `user` (and their `email`) in each request."""
    headers = {"X-Auth-Request-User": user, **more}
    if email:
        headers["X-Auth-Request-Email"] = email
    return Client(REMOTE_ADDR=address, headers=headers)


def who(client: Client) -> str | None:
    """Whom the API takes the browser for (None: nobody)."""
    answer = client.get(ME)
    return answer.json()["username"] if answer.status_code == 200 else None


def test_the_proxys_user_is_logged_in_their_account_made_with_its_email_address(proxy):
    browser = signed("alice", "alice@corp.example.com")

    page = browser.get("/")

    alice = get_user_model().objects.get(username="alice")
    assert page.status_code == 200
    assert who(browser) == "alice"
    assert alice.email == "alice@corp.example.com"
    assert not (alice.is_staff or alice.is_superuser or alice.has_usable_password())


def test_an_existing_account_takes_the_proxys_email_address_at_its_next_login(proxy):
    UserFactory(username="alice", email="old@corp.example.com")

    signed("alice", "new@corp.example.com").get(ME)

    assert get_user_model().objects.get(username="alice").email == "new@corp.example.com"


def test_an_email_header_that_is_no_address_is_not_taken(proxy):
    UserFactory(username="alice", email="alice@corp.example.com")

    assert who(signed("alice", "not an address")) == "alice"
    assert get_user_model().objects.get(username="alice").email == "alice@corp.example.com"


def test_without_the_setting_the_header_is_nobodys(settings):
    UserFactory(username="alice")

    assert who(signed("alice")) is None
    assert get_user_model().objects.filter(username="alice").count() == 1


def test_a_session_the_proxy_logged_in_ends_once_its_header_stops_or_names_another(proxy):
    UserFactory(username="bob")
    browser = signed("alice")
    who(browser)

    browser.defaults.pop("HTTP_X_AUTH_REQUEST_USER")
    gone = who(browser)
    browser.defaults["HTTP_X_AUTH_REQUEST_USER"] = "alice"
    back = who(browser)
    browser.defaults["HTTP_X_AUTH_REQUEST_USER"] = "bob"
    switched = who(browser)

    assert (gone, back, switched) == (None, "alice", "bob")


def test_a_password_login_is_left_alone_while_no_header_comes(proxy):
    admin = UserFactory(username="root-admin", is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(admin)

    assert who(browser) == "root-admin"
    assert who(browser) == "root-admin"


def test_without_account_making_only_existing_accounts_log_in(proxy):
    proxy.MLSCHED_AUTH_CREATES_USERS = False
    UserFactory(username="alice")

    assert who(signed("alice")) == "alice"
    assert who(signed("mallory")) is None
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_an_inactive_account_is_not_logged_in(proxy):
    UserFactory(username="alice", is_active=False)

    assert who(signed("alice")) is None


@pytest.mark.parametrize("name", ["alice smith", "x" * 151, "<script>", ""])
def test_a_name_that_is_no_username_logs_nobody_in_and_makes_no_account(proxy, name):
    before = get_user_model().objects.count()

    assert who(signed(name)) is None
    assert get_user_model().objects.count() == before


def test_the_header_from_a_peer_outside_the_proxys_networks_is_ignored(proxy):
    proxy.MLSCHED_AUTH_PROXY_FROM = "10.0.0.0/8, 192.168.1.7"

    assert who(signed("alice", address="10.1.2.3")) == "alice"
    assert who(signed("alice", address="192.168.1.7")) == "alice"
    assert who(signed("mallory", address="192.168.1.8")) is None
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_logging_out_goes_to_the_proxys_sign_out(proxy):
    proxy.LOGOUT_REDIRECT_URL = "/oauth2/sign_out?rd=%2F"
    browser = signed("alice")
    who(browser)

    out = browser.post("/accounts/logout/")

    assert out.status_code == 302 and out["Location"] == "/oauth2/sign_out?rd=%2F"


@pytest.mark.django_db(transaction=True)
async def test_the_header_logs_in_through_the_asgi_handler_as_daphne_serves(proxy):
    answer = await AsyncClient().get(ME, headers={"X-Auth-Request-User": "alice"})

    assert answer.status_code == 200 and answer.json()["username"] == "alice"


def test_a_proxy_network_that_is_no_network_stops_the_server_at_start():
    env = {**os.environ, "MLSCHED_AUTH_PROXY_FROM": "10.0.0.0/8,proxy.internal"}

    checked = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert checked.returncode != 0
    assert "MLSCHED_AUTH_PROXY_FROM: 'proxy.internal' is no network" in checked.stderr
