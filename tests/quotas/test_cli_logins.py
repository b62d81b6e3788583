"""`mlsched login`'s server side (quotas.cli_logins): the CLI starts a login and polls, its user
approves or denies it on the portal's /cli-login/ page, and the first poll after an approval
gets an API token of theirs, once."""

import hashlib
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from mlsched_site.middleware import CONTENT_SECURITY_POLICY
from quotas import cli_logins, tokens
from quotas.models import ApiToken, CliLogin
from tests.test_settings import load_settings

pytestmark = pytest.mark.django_db

USER_CODE = re.compile(r"[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}")


@pytest.fixture
def cli():
    """The command line's client: no authentication."""
    return APIClient()


@pytest.fixture
def portal(client, alice):
    client.force_login(alice)
    return client


def started(cli, **body) -> dict:
    answer = cli.post("/api/v1/cli-logins/", body, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def polled(cli, login: dict):
    return cli.post("/api/v1/cli-logins/token/", {"device_code": login["device_code"]},
                    format="json")  # fmt: skip


def interval_passed() -> None:
    """Every login's last poll a minute ago: the next poll comes late enough."""
    CliLogin.objects.update(last_polled=timezone.now() - timedelta(minutes=1))


def decided(portal, login: dict, decision: str, **form):
    return portal.post("/cli-login/", {"code": login["user_code"], "decision": decision, **form})


def with_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_the_whole_flow_gives_the_approving_user_a_token_once(cli, portal, alice):
    login = started(cli, name="mlsched CLI on laptop")
    pending = polled(cli, login)
    page = portal.get(f"/cli-login/?code={login['user_code']}")
    confirming = portal.post("/cli-login/", {"code": login["user_code"]})
    approved = decided(portal, login, "approve")
    interval_passed()
    granted = polled(cli, login)
    interval_passed()
    again = polled(cli, login)

    assert (pending.status_code, pending.json()["error"]) == (400, "authorization_pending")
    assert f'value="{login["user_code"]}"' in page.text
    assert "mlsched CLI on laptop" in confirming.text and "127.0.0.1" in confirming.text
    assert "Approved" in approved.text
    assert granted.status_code == 200
    assert granted.json()["username"] == "alice" and granted.json()["expires"]
    me = with_token(granted.json()["token"]).get("/api/v1/me/").json()
    assert me["username"] == "alice"
    assert me["token"]["name"] == "mlsched CLI on laptop" and not me["token"]["read_only"]
    assert (again.status_code, again.json()["error"]) == (400, "expired_token")


def test_starting_gives_both_codes_the_pages_address_and_the_timings(cli):
    login = started(cli)

    assert len(login["device_code"]) >= 43
    assert USER_CODE.fullmatch(login["user_code"])
    assert login["verification_uri"] == "http://testserver/cli-login/"
    assert login["verification_uri_complete"] == (
        f"http://testserver/cli-login/?code={login['user_code']}"
    )
    assert (login["expires_in"], login["interval"]) == (600, 5)
    assert CliLogin.objects.get().name == cli_logins.DEFAULT_NAME


def test_the_pages_address_is_under_mlsched_public_url_where_set(cli, settings):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"

    login = started(cli)

    assert login["verification_uri"] == "https://mlsched.example.com/cli-login/"


def test_the_device_code_is_kept_only_as_its_sha256(cli):
    login = started(cli)

    row = CliLogin.objects.values().get()
    assert row["device_code_hash"] == hashlib.sha256(login["device_code"].encode()).hexdigest()
    assert not any(login["device_code"] in str(value) for value in row.values())


def test_the_tokens_key_is_in_the_answer_alone(cli, portal):
    login = started(cli)
    decided(portal, login, "approve")

    key = polled(cli, login).json()["token"]

    row = CliLogin.objects.select_related("token").get()
    assert (row.state, row.token.key_hash) == ("spent", tokens.hash_key(key))
    assert not any(key in str(value) for value in CliLogin.objects.values().get().values())
    assert not any(key in str(value) for value in ApiToken.objects.values().get().values())


def test_a_denied_login_is_told_access_denied_and_gets_no_token(cli, portal):
    login = started(cli)

    denied = decided(portal, login, "deny")
    refused = polled(cli, login)

    assert "Denied" in denied.text
    assert (refused.status_code, refused.json()["error"]) == (400, "access_denied")
    assert not ApiToken.objects.exists()


def test_an_expired_login_is_told_expired_token_and_its_code_no_longer_works(cli, portal):
    login = started(cli)
    CliLogin.objects.update(expires=timezone.now() - timedelta(seconds=1))

    refused = polled(cli, login)
    page = decided(portal, login, "approve")

    assert (refused.status_code, refused.json()["error"]) == (400, "expired_token")
    assert page.status_code == 200 and "No login waits for this code" in page.text
    assert CliLogin.objects.get().state == "pending" and not ApiToken.objects.exists()


def test_an_approved_login_polled_after_it_expired_gets_no_token(cli, portal):
    login = started(cli)
    decided(portal, login, "approve")
    CliLogin.objects.update(expires=timezone.now() - timedelta(seconds=1))

    refused = polled(cli, login)

    assert refused.json()["error"] == "expired_token" and not ApiToken.objects.exists()


def test_polling_sooner_than_the_interval_is_slow_down_and_adds_5_s_to_it_each_time(cli):
    login = started(cli)

    first = polled(cli, login)
    second = polled(cli, login)
    after_second = CliLogin.objects.get().interval_s
    third = polled(cli, login)
    after_third = CliLogin.objects.get().interval_s
    interval_passed()
    in_time = polled(cli, login)

    assert first.json()["error"] == "authorization_pending"
    assert [second.json()["error"], third.json()["error"]] == ["slow_down", "slow_down"]
    assert (after_second, after_third) == (10, 15)
    assert in_time.json()["error"] == "authorization_pending"


def test_an_unknown_device_code_is_expired_token(cli):
    refused = polled(cli, {"device_code": "not-a-code-this-server-gave"})
    missing = cli.post("/api/v1/cli-logins/token/", {}, format="json")

    assert (refused.status_code, refused.json()["error"]) == (400, "expired_token")
    assert (missing.status_code, missing.json()["error"]) == (400, "invalid_request")


@pytest.mark.parametrize("name", ["", "   ", "x" * 101, "laptop\x00", 7])
def test_a_name_no_token_could_have_is_a_400_naming_name(cli, name):
    answer = cli.post("/api/v1/cli-logins/", {"name": name}, format="json")

    assert answer.status_code == 400 and "name" in answer.json()
    assert not CliLogin.objects.exists()


def test_more_than_10_logins_a_minute_from_one_address_are_a_429(cli):
    answers = [cli.post("/api/v1/cli-logins/", {}, format="json") for _ in range(11)]
    elsewhere = cli.post("/api/v1/cli-logins/", {}, format="json", REMOTE_ADDR="10.0.0.9")

    assert [a.status_code for a in answers] == [201] * 10 + [429]
    assert "Retry-After" in answers[-1]
    assert elsewhere.status_code == 201


def test_logins_older_than_a_day_are_deleted_when_one_starts(cli):
    old = started(cli)
    CliLogin.objects.update(created=timezone.now() - timedelta(days=1, minutes=1))

    new = started(cli)

    assert [row.device_code_hash for row in CliLogin.objects.all()] == [
        tokens.hash_key(new["device_code"])
    ]
    assert tokens.hash_key(old["device_code"]) != tokens.hash_key(new["device_code"])


def test_a_read_only_approval_gives_a_read_only_token(cli, portal, alpha):
    login = started(cli)

    decided(portal, login, "approve", read_only="on")
    key = polled(cli, login).json()["token"]

    client = with_token(key)
    assert client.get("/api/v1/me/").json()["token"]["read_only"] is True
    added = client.post(f"/api/v1/tenants/{alpha.slug}/members/", {"username": "bob"},
                        format="json")  # fmt: skip
    assert added.status_code == 403


def test_the_token_expires_after_mlsched_cli_login_token_days(cli, portal, settings):
    settings.MLSCHED_CLI_LOGIN_TOKEN_DAYS = 90
    login = started(cli)
    decided(portal, login, "approve")

    polled(cli, login)

    lasts = ApiToken.objects.get().expires - timezone.now()
    assert timedelta(days=89, hours=23) < lasts <= timedelta(days=90)


def test_the_code_is_taken_in_any_case_with_or_without_its_dash(cli, portal):
    login = started(cli)
    typed = login["user_code"].replace("-", "").lower()

    page = portal.post("/cli-login/", {"code": f" {typed[:4]} {typed[4:]} "})

    assert page.status_code == 200 and 'value="approve"' in page.text


def test_a_wrong_code_says_so_on_the_page(portal):
    page = portal.post("/cli-login/", {"code": "BCDF-GHJK"})

    assert page.status_code == 200
    assert "No login waits for this code" in page.text and 'value="approve"' not in page.text


def test_after_10_wrong_codes_the_page_refuses_codes_with_a_429(cli, portal, bob):
    login = started(cli)
    wrong = [portal.post("/cli-login/", {"code": "BCDF-GHJK"}) for _ in range(10)]

    right = portal.post("/cli-login/", {"code": login["user_code"]})
    other = Client()
    other.force_login(bob)
    bobs = other.post("/cli-login/", {"code": login["user_code"]})

    assert [page.status_code for page in wrong] == [200] * 10
    assert right.status_code == 429 and "Too many wrong codes" in right.text
    assert bobs.status_code == 200 and 'value="approve"' in bobs.text


def test_approving_writes_the_platforms_history(cli, portal, alice):
    login = started(cli, name="mlsched CLI on laptop")

    decided(portal, login, "approve", read_only="on")

    entry = LogEntry.objects.get(user=alice, object_repr__startswith="CLI login")
    assert "mlsched CLI on laptop" in entry.object_repr
    assert "read-only" in entry.get_change_message()


def test_a_login_approved_already_is_not_decided_again(cli, portal, bob):
    login = started(cli)
    decided(portal, login, "approve")
    other = Client()
    other.force_login(bob)

    again = decided(other, login, "deny")

    assert "No login waits for this code" in again.text
    assert CliLogin.objects.get().state == "approved"
    assert CliLogin.objects.get().user.username == "alice"


def test_the_page_needs_a_login_and_the_csrf_token(client, alice):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)

    anonymous = client.get("/cli-login/")
    posted = browser.post("/cli-login/", {"code": "BCDF-GHJK"})

    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert posted.status_code == 403


def test_the_page_carries_the_content_security_policy_and_is_not_cached(portal):
    page = portal.get("/cli-login/?code=BCDF-GHJK")

    assert page["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "no-store" in page["Cache-Control"]


@pytest.mark.parametrize("days", ["45", "thirty"])
def test_the_server_refuses_to_start_with_a_token_life_the_portal_does_not_offer(days):
    run = load_settings(MLSCHED_CLI_LOGIN_TOKEN_DAYS=days)

    assert run.returncode != 0
    assert "ImproperlyConfigured" in run.stderr and "MLSCHED_CLI_LOGIN_TOKEN_DAYS" in run.stderr
