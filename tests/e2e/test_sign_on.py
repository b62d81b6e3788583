"""OpenID Connect sign-on in Chromium: the login page's link goes through the identity provider
(tests/oidc_provider.py, which signs its user in at once) and back to the portal, logged in as
that user; logging out ends the provider's session too and comes back to the portal; the
provider ending its session, by its back-channel logout or by refusing the session's refresh
token at its next check, logs the browser out (quotas/oidc_sessions.py)."""

import time

import pytest
import requests
from playwright.sync_api import expect

from tests.e2e.conftest import daphne
from tests.oidc_provider import Provider

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def provider():
    with Provider() as provider:
        yield provider


@pytest.fixture
def portal(provider):
    """The portal served with the provider's sign-on on, each session checked with it again
    every second."""
    signs_on = {"MLSCHED_OIDC_ISSUER": provider.issuer, "MLSCHED_OIDC_NAME": "Corp SSO",
                "MLSCHED_OIDC_CLIENT_ID": provider.client_id,
                "MLSCHED_OIDC_CLIENT_SECRET": provider.client_secret,
                "MLSCHED_OIDC_RECHECK_S": "1"}  # fmt: skip
    with daphne(**signs_on) as url:
        yield url


def signed_on(page, portal: str) -> None:
    page.goto(f"{portal}/queue/")
    page.get_by_role("link", name="Sign in with Corp SSO").click()
    page.wait_for_url(f"{portal}/queue/")
    expect(page.locator("header nav")).to_contain_text("alice")


def test_the_login_pages_link_signs_in_through_the_provider_and_out_again(
    portal, provider, browser_page, policy_refused
):
    page, refused = browser_page, policy_refused
    page.goto(f"{portal}/queue/")

    page.get_by_role("link", name="Sign in with Corp SSO").click()

    page.wait_for_url(f"{portal}/queue/")
    expect(page.locator("header nav")).to_contain_text("alice")

    page.get_by_role("button", name="Log out").click()

    page.wait_for_url(f"{portal}/")
    expect(page.locator("header nav")).to_have_text("Log in")
    assert [done["client_id"] for done in provider.logged_out] == [provider.client_id]
    assert refused == []


def test_the_providers_back_channel_logout_logs_the_browser_out(portal, provider, browser_page):
    signed_on(browser_page, portal)

    ended = requests.post(f"{portal}/accounts/oidc/backchannel-logout/",
                          data={"logout_token": provider.logout_token()}, timeout=10)  # fmt: skip

    assert ended.status_code == 200
    browser_page.reload()
    expect(browser_page).to_have_url(f"{portal}/accounts/login/?next=/queue/")


def test_a_session_the_provider_ended_is_logged_out_at_its_next_check(
    portal, provider, browser_page
):
    signed_on(browser_page, portal)
    time.sleep(1.2)
    browser_page.reload()
    expect(browser_page.locator("header nav")).to_contain_text("alice")
    assert provider.refreshes == 1

    provider.end_sessions()
    time.sleep(1.2)
    browser_page.reload()

    expect(browser_page).to_have_url(f"{portal}/accounts/login/?next=/queue/")
