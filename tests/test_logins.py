"""Password guessing slowed down at the login pages: an account's logins from one address are
refused after its failures there, every login from an address after many failures whatever
the accounts, and a success forgets the account's failures (quotas/logins.py). The counts are
kept in the throttle cache, Redis under make test."""

import pytest
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "right-password-1"
LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"


def user(username, **fields):
    user = UserFactory(username=username, **fields)
    user.set_password(PASSWORD)
    user.save()
    return user


@pytest.fixture
def alice():
    return user("alice", is_staff=True)


@pytest.fixture
def three(settings):
    """Three failures refuse a login, for tests of what the count is, not of its default."""
    settings.MLSCHED_LOGIN_FAILURES = 3


def log_in(address="10.0.0.1", username="alice", password=PASSWORD, page=LOGIN, **headers):
    """A login posted from a new browser at `address`: the answer, and whether it logged in."""
    browser = Client(REMOTE_ADDR=address, headers=headers)
    answer = browser.post(page, {"username": username, "password": password})
    return answer, "_auth_user_id" in browser.session


def fail(times, address="10.0.0.1", username="alice", page=LOGIN):
    for _ in range(times):
        answer, logged_in = log_in(address, username, "wrong", page)
        assert answer.status_code == 200 and not logged_in


def test_an_accounts_logins_from_an_address_are_refused_after_ten_failures_there(alice):
    fail(9)
    tenth_try, _ = log_in(password="wrong")
    refused, logged_in = log_in()

    assert "Please enter a correct username and password" in tenth_try.text
    assert refused.status_code == 429
    assert not logged_in
    assert (
        "Too many failed logins for this account from your address: try again in 15 minutes "
        "at most, or have your password reset." in refused.text
    )


def test_the_account_still_logs_in_from_another_address_and_another_account_from_there(
    alice, three
):
    user("bob")
    fail(3)

    elsewhere, alice_logged_in = log_in("10.0.0.2")
    _, bob_logged_in = log_in(username="bob")

    assert elsewhere.status_code == 302 and alice_logged_in
    assert bob_logged_in


def test_a_login_that_succeeds_forgets_the_accounts_failures(alice, three):
    fail(2)
    _, first = log_in()
    fail(2)
    _, second = log_in()

    assert first and second


def test_many_failures_from_one_address_whatever_the_accounts_refuse_every_login_there(
    alice, three
):
    for n in range(10):  # ten times an account's, none past its own
        fail(3, username=f"guess{n}")

    refused, logged_in = log_in()
    _, elsewhere = log_in("10.0.0.2")

    assert refused.status_code == 429 and not logged_in
    assert "Too many failed logins from your address: try again in 15 minutes" in refused.text
    assert elsewhere


def test_the_admins_login_counts_failures_with_the_portals(alice, three):
    fail(2)
    fail(1, page=ADMIN_LOGIN)

    refused, logged_in = log_in(page=ADMIN_LOGIN)

    assert not logged_in
    assert "Too many failed logins for this account from your address" in refused.text


def test_behind_a_proxy_the_address_is_the_one_it_was_reached_from(alice, three, settings):
    settings.MLSCHED_PROXIES = 1
    # The proxy's own address is the peer; the client may write entries of its own in front.
    for n in range(3):
        log_in("10.9.9.9", password="wrong", X_Forwarded_For=f"1.2.3.{n}, 203.0.113.7")

    refused, _ = log_in("10.9.9.9", X_Forwarded_For="203.0.113.7")
    _, other_client = log_in("10.9.9.9", X_Forwarded_For="203.0.113.8")

    assert refused.status_code == 429
    assert other_client


def test_without_proxies_a_forwarded_address_is_the_clients_to_write_and_not_read(alice, three):
    for n in range(3):
        log_in(password="wrong", X_Forwarded_For=f"203.0.113.{n}")

    refused, _ = log_in(X_Forwarded_For="198.51.100.1")

    assert refused.status_code == 429


def test_no_limit_when_the_platform_sets_none(alice, settings):
    settings.MLSCHED_LOGIN_FAILURES = 0
    fail(15)

    _, logged_in = log_in()

    assert logged_in


def change_password(browser, old):
    new = "a-new-password-9"
    return browser.post(
        "/accounts/password/", {"old_password": old, "new_password1": new, "new_password2": new}
    )


def test_a_wrong_password_at_its_change_counts_as_a_failed_login_of_the_account(alice, three):
    browser = Client(REMOTE_ADDR="10.0.0.1")
    browser.force_login(alice)  # a session someone holds, guessing the password behind it
    wrong = [change_password(browser, "wrong") for _ in range(3)]

    refused = change_password(browser, PASSWORD)
    _, logged_in = log_in()
    alice.refresh_from_db()

    assert all("Your old password was entered incorrectly" in answer.text for answer in wrong)
    assert "Too many failed logins for this account from your address" in refused.text
    assert not logged_in
    assert alice.check_password(PASSWORD)
