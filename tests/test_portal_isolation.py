"""Tenants are isolated on every page of the portal: each form a team's owner (or a platform
admin) is shown, sent as they would send it, writes nothing when the owner of another team or
a viewer of the team sends it; no page, asked for a team's things by address or by its
filters, shows them to the owner of another team; and no page shows a secret's value."""

from urllib.parse import urljoin

import pytest
import yaml
from django.test import Client

from tests.factories import MembershipFactory, UserFactory
from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_api_isolation import LABEL, MARK, SECRET_VALUE, footprint, marked, text_of  # noqa: F401
from tests.test_openapi import root, world  # noqa: F401
from tests.test_portal_bad_input import forms_of, html_of, pages

pytestmark = pytest.mark.django_db(transaction=True)

# Forms on the sender's own account (their password, address, tokens, sign-on), which another
# one's sending cannot reach, and signing out.
OWN = ("/accounts/", "/tokens/", "/cli-login/", "/logout/", "/i18n/")


def browser(user) -> Client:
    client = Client(raise_request_exception=False)  # a 500 is an answer to count
    client.force_login(user)
    return client


def addresses(planted: dict) -> list[str]:
    """Every page, its lists also asked for alpha's things by their filters."""
    urls = pages(planted["id"]) + [f"/jobs/{planted['queued']}/"]
    return urls + [f"{url}?tenant=alpha&label=team={LABEL}"
                   for url in urls if "/jobs/" not in url or url == "/jobs.csv"]  # fmt: skip


def sound_forms(planted: dict, *users, leaving_out=OWN) -> list[tuple[str, dict]]:
    """Each form the users are shown that changes something (posted), as they would send it:
    (address, fields), each once; those posted to an address starting as one of `leaving_out`
    left out."""
    found = {}
    for user in users:
        client = browser(user)
        for page in addresses(planted):
            for action, method, values in forms_of(html_of(client.get(page))):
                where = urljoin(page, action or page)
                if method == "post" and not where.startswith(leaving_out):
                    found.setdefault((where, tuple(sorted(values))), values)
    return [(where, values) for (where, _), values in found.items()]


def test_no_form_reaches_a_team_from_outside_it(marked, alice, alpha, charlie, root):  # noqa: F811
    vera = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=vera, role="viewer")
    intruders = {
        "charlie (gamma's owner)": browser(charlie),
        "vera (alpha's viewer)": browser(vera),
    }
    forms = sound_forms(marked, alice, root)
    reached = []
    for where, fields in forms:
        for who, intruder in intruders.items():
            before = footprint()
            answer = intruder.post(where, fields)
            if footprint() != before:
                reached.append(f"{who}: {where}: {answer.status_code}")

    assert not reached, yaml.safe_dump(reached, width=200)
    # The forms were found: a job's verbs, a team's members, secrets, submission.
    posted = {where for where, _ in forms}
    assert {f"/jobs/{marked['queued']}/cancel/", "/teams/alpha/members/", "/jobs/new/"} <= posted


def test_a_form_sent_by_its_team_owner_writes(marked, alice):  # noqa: F811
    # The sweep above would find nothing if no form wrote for anyone: alice's own cancel does.
    before = footprint()
    browser(alice).post(f"/jobs/{marked['queued']}/cancel/", {})
    assert footprint() != before


def test_no_page_shows_a_team_to_the_owner_of_another(marked, charlie):  # noqa: F811
    client = browser(charlie)
    shown = [f"{url}: {answer.status_code}" for url in addresses(marked)
             if MARK in text_of(answer := client.get(url)).lower()]  # fmt: skip

    assert not shown, yaml.safe_dump(shown, width=200)


def test_no_page_shows_a_secrets_value(marked, alice, root):  # noqa: F811
    shown = [f"{user}: {url}" for user in (alice, root) for url in addresses(marked)
             if SECRET_VALUE in text_of(browser(user).get(url))]  # fmt: skip

    assert not shown, yaml.safe_dump(shown, width=200)


def test_the_planted_things_are_shown_to_their_team(marked, alice):  # noqa: F811
    client = browser(alice)
    found = {url for url in addresses(marked) if MARK in text_of(client.get(url)).lower()}
    assert {"/", f"/jobs/{marked['queued']}/", "/secrets/", "/teams/", "/jobs.csv"} <= found, found
