"""Every form of the portal answers input it cannot take with a page saying so, never a 500:
each form on each page, as a team's owner and as a platform admin, is sent with each of its
fields as every kind of wrong text (the others as the page filled them), and each page is
asked with each of its forms' fields, and each query parameter it reads, as text it cannot
read."""

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

import pytest
import yaml
from django.test import Client

from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_openapi import root, world  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

# Text a form field may be wrong with: none, a NUL, a word, numbers past every column's end,
# negative, a date no calendar has, a long text, broken YAML.
WRONG = ["", "\x00", "x", "9" * 40, "-1", "2026-13-45", "x" * 70_000, "{"]
# What a query parameter is asked as.
ASKED = ["x", "9" * 40, "-1", "2026-13-45"]
# The query parameters pages read beyond their forms' fields.
QUERY = ["page", "before", "after", "limit", "sort", "order", "state", "tenant", "copy", "q",
         "since", "until", "label", "mine", "fold", "code", "next"]  # fmt: skip


class Forms(HTMLParser):
    """The page's forms: each one's action, method and what a browser would send of it."""

    def __init__(self):
        super().__init__()
        self.forms: list[tuple[str, str, dict[str, str]]] = []
        self._textarea = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        name = attrs.get("name")
        if tag == "form":
            self.forms.append((attrs.get("action") or "", (attrs.get("method") or "get").lower(),
                               {}))  # fmt: skip
        if not self.forms or not name:
            return
        values = self.forms[-1][2]
        if tag == "input" and (attrs.get("type") not in ("checkbox", "radio")
                               or "checked" in attrs):  # fmt: skip
            values[name] = attrs.get("value") or ""
        elif tag == "select":  # sent as none of its options: wrong too
            values.setdefault(name, "")
        elif tag == "textarea":
            self._textarea = name
            values[name] = ""
        elif tag == "button" and attrs.get("value"):  # the form's verb: `verb=cancel`
            values.setdefault(name, attrs["value"])

    def handle_data(self, data):
        if self._textarea and self.forms:
            self.forms[-1][2][self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "textarea":
            self._textarea = None

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)


def forms_of(html: str) -> list[tuple[str, str, dict[str, str]]]:
    parser = Forms()
    parser.feed(html)
    return parser.forms


def pages(job: int) -> list[str]:
    return ["/", "/queue/", "/jobs/new/", f"/jobs/{job}/", "/overview/", "/clusters/", "/usage/",
            "/quotas/", "/secrets/", "/teams/", "/tokens/", "/cli-login/", "/accounts/email/",
            "/accounts/password/", "/accounts/sign-ins/", "/jobs.csv", "/usage.csv",
            "/usage-daily.csv"]  # fmt: skip


def html_of(answer) -> str:
    return answer.content.decode() if "html" in answer.get("Content-Type", "") else ""


def tries(page: str, html: str, seen: set):
    """What a page is asked and its forms sent, each (method, address, fields) once whoever
    asks: the page with each query parameter wrong, then each form with each field wrong."""
    if page not in seen:
        seen.add(page)
        yield from (("get", page, {name: value}) for name in QUERY for value in ASKED)
    for action, method, values in forms_of(html):
        where = urljoin(page, action or page)
        form = (method, re.sub(r"\d+", "N", where), tuple(sorted(values)))
        if "logout" in where or form in seen:
            continue
        seen.add(form)
        for name in values:
            yield from ((method, where, {**values, name: value}) for value in WRONG)


def test_no_form_or_page_answers_wrong_input_with_a_500(platform, alice, root):  # noqa: F811
    failures, seen, sent = [], set(), 0
    for user in (alice, root):
        browser = Client(raise_request_exception=False)
        browser.force_login(user)
        for page in pages(platform["id"]):
            answer = browser.get(page)
            assert answer.status_code < 500, page
            for method, where, fields in tries(page, html_of(answer), seen):
                asked = browser.post(where, fields) if method == "post" else browser.get(
                    where, fields)  # fmt: skip
                sent += 1
                if asked.status_code >= 500:
                    wrong = [(name, value[:40]) for name, value in fields.items()]
                    failures.append((user.username, method, where, wrong))

    assert not failures, yaml.safe_dump(failures[:40], width=200)
    assert sent > 1000  # the pages' forms were found and sent


def test_the_forms_are_found(platform, alice):  # noqa: F811
    browser = Client()
    browser.force_login(alice)
    found = {(method, urljoin(page, action or page))
             for page in pages(platform["id"])
             for action, method, _ in forms_of(html_of(browser.get(page)))}  # fmt: skip
    assert ("post", "/jobs/new/") in found
    assert ("post", f"/jobs/{platform['id']}/cancel/") in found
    assert ("post", "/teams/alpha/members/") in found
