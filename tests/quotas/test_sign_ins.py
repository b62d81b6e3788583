"""Sign-ins kept for security audits (quotas/sign_ins.py): each login by password, through the
proxy or with OpenID Connect, and each attempt that failed, with the name given, the client's
address and why, never a password or a token (the proxy's failures once per name, reason and
address in 10 minutes, not once per request); deleted after MLSCHED_SIGN_IN_RETENTION_DAYS;
read by platform admins alone in the admin, at GET /api/v1/sign-ins/ and with the CLI."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import DatabaseError
from django.test import Client
from django.utils import timezone

from jobs import events, retention
from quotas import proxy_auth, sign_ins
from quotas.models import Membership, SignIn
from tests.clusters.test_node_service_api import cli_of
from tests.factories import MembershipFactory, UserFactory
from tests.oidc_provider import sign_on
from tests.quotas.test_history import api, portal
from tests.test_logins import ADMIN_LOGIN, fail, log_in
from tests.test_logins import user as with_password
from tests.test_proxy_auth import ME, proxy, signed, who  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

SIGN_INS = "/api/v1/sign-ins/"
LIST = "/admin/quotas/signin/"
WRONG = "wrong-password-never-kept"


def rows() -> list[tuple]:
    """The sign-ins, oldest first: the name, the account's, how, whether it succeeded, from
    where and why not."""
    kept = SignIn.objects.order_by("id").select_related("user")
    return [(s.username, s.user.username if s.user else None, s.method, s.succeeded, s.address,
             s.reason) for s in kept]  # fmt: skip


def test_a_portal_password_login_is_kept_as_a_password_sign_in_from_the_clients_address():
    with_password("alice")

    _, logged_in = log_in("10.0.0.7")

    assert logged_in
    assert rows() == [("alice", "alice", "password", True, "10.0.0.7", "")]


def test_the_admins_login_is_kept_as_a_password_sign_in_too():
    with_password("alice", is_staff=True)

    log_in("10.0.0.7", page=ADMIN_LOGIN)

    assert rows() == [("alice", "alice", "password", True, "10.0.0.7", "")]


def test_a_wrong_password_is_kept_as_failed_with_the_username_and_no_password_anywhere():
    with_password("alice")

    _, logged_in = log_in("10.0.0.7", password=WRONG)

    assert not logged_in
    assert rows() == [("alice", "alice", "password", False, "10.0.0.7", sign_ins.WRONG)]
    assert WRONG not in str(list(SignIn.objects.values()))


def test_an_unknown_username_is_kept_with_no_account():
    log_in("10.0.0.7", username="nobody", password=WRONG)

    assert rows() == [("nobody", None, "password", False, "10.0.0.7", sign_ins.WRONG)]


def test_an_inactive_accounts_password_login_is_kept_as_failed_for_it():
    with_password("alice", is_active=False)

    log_in("10.0.0.7")

    assert rows() == [("alice", "alice", "password", False, "10.0.0.7", sign_ins.INACTIVE)]


def test_the_login_guards_refusal_is_kept_as_refused(settings):
    settings.MLSCHED_LOGIN_FAILURES = 2
    with_password("alice")
    fail(2, address="10.0.0.7")

    refused, logged_in = log_in("10.0.0.7")

    assert refused.status_code == 429 and not logged_in
    assert rows()[-1] == ("alice", "alice", "password", False, "10.0.0.7", sign_ins.REFUSED)
    assert [r[5] for r in rows()] == [sign_ins.WRONG, sign_ins.WRONG, sign_ins.REFUSED]


def test_a_proxy_sign_in_is_kept_as_proxy_once_for_its_session(proxy):  # noqa: F811
    browser = signed("alice", address="10.0.0.8")

    assert who(browser) == "alice"
    assert who(browser) == "alice"
    assert rows() == [("alice", "alice", "proxy", True, "10.0.0.8", "")]


def test_an_inactive_account_the_proxy_names_is_kept_as_a_failed_proxy_sign_in(proxy):  # noqa: F811
    UserFactory(username="alice", is_active=False)

    assert who(signed("alice", address="10.0.0.8")) is None
    assert rows() == [("alice", "alice", "proxy", False, "10.0.0.8", sign_ins.INACTIVE)]


def test_the_proxys_failure_is_kept_once_in_10_minutes_not_at_each_request_of_a_page(
    proxy,  # noqa: F811
):
    UserFactory(username="alice", is_active=False)
    browser = signed("alice", address="10.0.0.8")

    browser.get("/")
    for _ in range(5):  # its scripts and polls
        browser.get(ME)

    assert sign_ins.PROXY_FAILURE_EVERY == timedelta(minutes=10)
    assert rows() == [("alice", "alice", "proxy", False, "10.0.0.8", sign_ins.INACTIVE)]


def test_a_name_the_proxy_gives_that_is_no_username_is_kept_once_too(proxy):  # noqa: F811
    for _ in range(3):
        assert who(signed("not a name!", address="10.0.0.8")) is None

    assert rows() == [("not a name!", None, "proxy", False, "10.0.0.8", sign_ins.UNKNOWN)]


def test_another_name_reason_or_address_is_kept_at_once(proxy):  # noqa: F811
    proxy.MLSCHED_AUTH_CREATES_USERS = False
    UserFactory(username="alice", is_active=False)
    UserFactory(username="bob", is_active=False)

    for name, address in [("alice", "10.0.0.8"), ("alice", "10.0.0.9"), ("bob", "10.0.0.8"),
                          ("carol", "10.0.0.8"), ("alice", "10.0.0.8")]:  # fmt: skip
        signed(name, address=address).get(ME)
    UserFactory(username="carol", is_active=False)
    signed("carol", address="10.0.0.8").get(ME)

    assert [(r[0], r[4], r[5]) for r in rows()] == [
        ("alice", "10.0.0.8", sign_ins.INACTIVE),
        ("alice", "10.0.0.9", sign_ins.INACTIVE),
        ("bob", "10.0.0.8", sign_ins.INACTIVE),
        ("carol", "10.0.0.8", sign_ins.UNKNOWN),
        ("carol", "10.0.0.8", sign_ins.INACTIVE),
    ]


def test_the_proxys_failure_is_kept_again_once_its_time_is_over(proxy, monkeypatch):  # noqa: F811
    monkeypatch.setattr(sign_ins, "PROXY_FAILURE_EVERY", timedelta(seconds=1))
    UserFactory(username="alice", is_active=False)
    browser = signed("alice", address="10.0.0.8")

    browser.get(ME)
    browser.get(ME)
    time.sleep(1.2)
    browser.get(ME)

    assert [r[5] for r in rows()] == [sign_ins.INACTIVE] * 2


def test_with_the_throttle_cache_out_of_reach_each_proxy_failure_is_kept(
    proxy,  # noqa: F811
    monkeypatch,
):
    down = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    proxy.CACHES = {
        **proxy.CACHES,
        "throttle": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": down},
    }
    monkeypatch.setattr(events, "_warned_at", {})  # its warning logged, whatever ran before
    UserFactory(username="alice", is_active=False)
    browser = signed("alice", address="10.0.0.8")

    for _ in range(3):
        browser.get(ME)

    assert [r[5] for r in rows()] == [sign_ins.INACTIVE] * 3


def test_password_and_oidc_failures_are_each_kept_however_often_repeated(provider):  # noqa: F811
    with_password("alice")
    provider.error = "access_denied"

    for _ in range(3):
        log_in("10.0.0.7", password=WRONG)
        sign_on(Client())

    assert [(r[2], r[3]) for r in rows()] == [("password", False), ("oidc", False)] * 3


def test_an_oidc_sign_in_is_kept_as_oidc(provider):
    browser = Client()

    sign_on(browser)

    assert who(browser) == "alice"
    assert rows() == [("alice", "alice", "oidc", True, "127.0.0.1", "")]


def test_a_bad_oidc_token_is_kept_as_a_failed_oidc_sign_in_naming_nobody(provider):
    provider.token = {"aud": "another-client"}

    answer = sign_on(Client())

    assert answer.status_code == 403
    [(username, user, method, succeeded, address, reason)] = rows()
    assert (username, user, method, succeeded, address) == ("", None, "oidc", False, "127.0.0.1")
    assert reason.startswith("OpenID Connect sign-on failed: the ID token")
    assert "eyJ" not in reason  # no token, nor a part of one


def test_the_providers_refusal_and_a_refused_state_are_kept_as_failed_oidc_sign_ins(
    provider,
):
    provider.error = "access_denied"
    sign_on(Client())
    Client().get("/accounts/oidc/callback/", {"state": "forged", "code": "x"})

    assert [(r[2], r[3], r[5]) for r in rows()] == [
        (
            "oidc",
            False,
            "the identity provider refused the sign-on: access_denied The user said no.",
        ),
        ("oidc", False, "OpenID Connect callback refused: its state is not the session's"),
    ]


def test_an_oidc_name_of_a_password_account_is_kept_as_failed_with_that_account(
    provider,
):
    with_password("alice")  # the name the provider gives

    assert sign_on(Client()).status_code == 403
    assert rows() == [("alice", "alice", "oidc", False, "127.0.0.1", sign_ins.PASSWORD_ACCOUNT)]


def test_a_login_without_a_request_or_a_session_is_kept_without_an_address():
    alice = UserFactory(username="alice")
    Client().force_login(alice)
    alice.backend = proxy_auth.BACKEND

    sign_ins.logged_in(sender=type(alice), request=None, user=alice)

    assert rows() == [
        ("alice", "alice", "password", True, "", ""),
        ("alice", "alice", "proxy", True, "", ""),
    ]


def test_a_sign_in_that_cannot_be_written_leaves_the_login_done(monkeypatch, caplog):
    with_password("alice")

    def unwritable(*args, **kwargs):
        raise DatabaseError("disk full")

    monkeypatch.setattr(SignIn, "save", unwritable)

    _, logged_in = log_in("10.0.0.7")

    assert logged_in
    assert "a password sign-in of 'alice' not kept" in caplog.text
    assert not SignIn.objects.exists()


def kept(username: str, days_ago: float, succeeded: bool = True, address: str = "10.0.0.1"):
    return SignIn.objects.create(
        username=username, method=SignIn.Method.PASSWORD, succeeded=succeeded, address=address,
        reason="" if succeeded else sign_ins.WRONG, at=timezone.now() - timedelta(days=days_ago),
    )  # fmt: skip


def test_retention_deletes_sign_ins_past_the_setting_in_batches_and_keeps_the_rest(settings):
    settings.MLSCHED_SIGN_IN_RETENTION_DAYS = 30
    old = [kept(f"old{n}", days_ago=31 + n) for n in range(5)]
    recent = kept("recent", days_ago=29)

    counts = retention.prune(keep_days=0, job_days=0, batch=2)

    assert counts["sign_ins"] == len(old)
    assert list(SignIn.objects.values_list("pk", flat=True)) == [recent.pk]


def test_retention_of_0_days_keeps_every_sign_in(settings):
    settings.MLSCHED_SIGN_IN_RETENTION_DAYS = 0
    kept("ancient", days_ago=5000)

    counts = retention.prune(keep_days=0, job_days=0)

    assert counts["sign_ins"] == 0 and SignIn.objects.count() == 1


def test_platform_admins_read_the_sign_ins_newest_first_narrowed_and_paged(root):
    kept("alice", days_ago=3)
    kept("alice", days_ago=2.5, succeeded=False, address="10.0.0.9")
    kept("nobody", days_ago=1, succeeded=False, address="10.0.0.9")
    newest = kept("bob", days_ago=0.1)

    everything = api(root).get(SIGN_INS).json()
    failed = api(root).get(SIGN_INS, {"failed": "1"}).json()
    alices = api(root).get(SIGN_INS, {"user": "alice"}).json()
    there = api(root).get(SIGN_INS, {"address": "10.0.0.9", "failed": "0"}).json()
    window = api(root).get(SIGN_INS, {"since": "now-2d", "until": "now-12h"}).json()
    first = api(root).get(SIGN_INS, {"limit": 3}).json()
    rest = api(root).get(SIGN_INS, {"limit": 3, "before": first["next"]}).json()

    def names(answer) -> list[str]:
        return [s["username"] for s in answer["sign_ins"]]

    assert everything["sign_ins"][0] == {
        "id": newest.pk, "at": newest.at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "username": "bob", "method": "password", "succeeded": True, "address": "10.0.0.1",
        "reason": "",
    }  # fmt: skip
    assert names(everything) == ["bob", "nobody", "alice", "alice"] and everything["next"] is None
    assert names(failed) == ["nobody", "alice"]
    assert [s["succeeded"] for s in alices["sign_ins"]] == [False, True]
    assert names(there) == ["nobody", "alice"]
    assert names(window) == ["nobody"]
    assert (names(first), names(rest), rest["next"]) == (
        ["bob", "nobody", "alice"],
        ["alice"],
        None,
    )


def test_the_sign_ins_api_names_each_parameter_at_fault_and_is_a_platform_admins_alone(root, alice):
    bad = api(root).get(SIGN_INS, {"since": "soon", "until": "later", "failed": "maybe",
                                   "before": "x", "limit": "501"})  # fmt: skip
    member = api(alice).get(SIGN_INS)

    assert bad.status_code == 400
    assert set(bad.json()) == {"since", "until", "failed", "before", "limit"}
    assert member.status_code == 403


def test_the_admins_sign_in_list_is_a_platform_admins_alone(root, alpha):
    owner = UserFactory(username="olga", is_staff=True)
    MembershipFactory(tenant=alpha, user=owner, role=Membership.Role.OWNER)
    kept("mallory", days_ago=1, succeeded=False, address="203.0.113.9")

    admin = portal(root)  # root's login: a sign-in above mallory's failed one
    page = admin.get(LIST)
    searched = admin.get(LIST, {"q": "203.0.113"})
    failed = admin.get(LIST, {"succeeded__exact": "0", "method__exact": "password"})
    tenant_admin = portal(owner).get(LIST)
    add = admin.get(f"{LIST}add/")

    def listed(answer) -> list[str]:
        return [s.username for s in answer.context["cl"].result_list]

    assert page.status_code == 200
    assert listed(page) == ["root", "mallory"] and sign_ins.WRONG in page.text
    assert listed(searched) == listed(failed) == ["mallory"]
    assert tenant_admin.status_code == 403
    assert add.status_code == 403


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_the_sign_ins_a_line_each_narrowed_to_the_failed_ones(live_server, root):
    at = datetime(2026, 12, 3, 10, 41, 30, tzinfo=UTC)
    SignIn.objects.create(username="alice", method="password", succeeded=True,
                          address="10.0.0.7", at=at)  # fmt: skip
    SignIn.objects.create(username="nobody", method="password", succeeded=False,
                          address="10.0.0.9", reason=sign_ins.WRONG, at=at)  # fmt: skip
    cli = cli_of(live_server, root)

    listed = cli("sign-ins")
    failed = cli("sign-ins", "--failed", "--limit", "5")
    nobody = cli("sign-ins", "--user", "carol")
    wrong = cli("sign-ins", "--since", "soon")

    assert listed.returncode == 0, listed.stderr
    header, *lines = listed.stdout.splitlines()
    assert header.split() == ["time", "(UTC)", "username", "method", "result", "address", "reason"]
    assert lines[0].split() == ["2026-12-03", "10:41", "nobody", "password", "failed",
                                "10.0.0.9", *sign_ins.WRONG.split()]  # fmt: skip
    assert lines[1].split() == ["2026-12-03", "10:41", "alice", "password", "ok", "10.0.0.7"]
    assert [line.split()[2] for line in failed.stdout.splitlines()[1:]] == ["nobody"]
    assert nobody.stdout == "No sign-ins.\n"
    assert wrong.returncode == 1 and "since" in wrong.stderr


def test_users_see_their_own_sign_ins_and_the_failed_attempts_on_their_account_alone(client):
    alice = UserFactory(username="alice")
    UserFactory(username="bob")
    client.post("/accounts/login/", {"username": "alice", "password": "wrong"},
                REMOTE_ADDR="203.0.113.9")  # fmt: skip
    client.post("/accounts/login/", {"username": "bob", "password": "wrong"})
    client.force_login(alice)

    page = client.get("/accounts/sign-ins/").text

    assert page.count("<tr>") == 1 + 2  # the header; alice's failed attempt and her login
    assert "203.0.113.9" in page and "wrong password or unknown account" in page
    assert "bob" not in page
