"""OpenID Connect sign-on in Chromium: the login page's link goes through the identity provider
(tests/oidc_provider.py, which signs its user in at once) and back to the portal, logged in as
that user; logging out ends the provider's session too and comes back to the portal."""

import pytest
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
    """The portal served with the provider's sign-on on."""
    signs_on = {"MLSCHED_OIDC_ISSUER": provider.issuer, "MLSCHED_OIDC_NAME": "Corp SSO",
                "MLSCHED_OIDC_CLIENT_ID": provider.client_id,
                "MLSCHED_OIDC_CLIENT_SECRET": provider.client_secret}  # fmt: skip
    with daphne(**signs_on) as url:
        yield url


def test_the_login_pages_link_signs_in_through_the_provider_and_out_again(
    portal, provider, browser_page
):
    page = browser_page
    refused = []
    page.on("console", lambda message: refused.append(message.text)
            if "Content Security Policy" in message.text else None)  # fmt: skip
    page.goto(f"{portal}/queue/")

    page.get_by_role("link", name="Sign in with Corp SSO").click()

    page.wait_for_url(f"{portal}/queue/")
    expect(page.locator("header nav")).to_contain_text("alice")

    page.get_by_role("button", name="Log out").click()

    page.wait_for_url(f"{portal}/")
    expect(page.locator("header nav")).to_have_text("Log in")
    assert [done["client_id"] for done in provider.logged_out] == [provider.client_id]
    assert refused == []
