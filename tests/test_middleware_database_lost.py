"""A middleware that reads the database before the view (a sign-in by the authenticating proxy,
an OpenID Connect session's check with its provider) and loses it answers as the views do: a
503 with Retry-After, JSON under /api/, the page saying to try again elsewhere; not a 500."""

import pytest
from django.db import connection
from django.test import Client

from tests.oidc_provider import sign_on, who
from tests.test_api_faults import end_connection
from tests.test_oidc_sessions import due
from tests.test_proxy_auth import proxy, signed  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


class LostAtOnce:
    """A connection's execute wrapper that has the connection ended before its first statement
    (a read as much as a write)."""

    def __call__(self, execute, sql, params, many, context):
        if not hasattr(self, "done"):
            self.done = True
            end_connection(context["connection"])
        return execute(sql, params, many, context)


def lost(client: Client, path: str):
    """The client's GET of `path`, its connection ended before its first statement."""
    with connection.execute_wrapper(LostAtOnce()):
        answer = client.get(path)
    connection.close()
    return answer


@pytest.mark.parametrize("path", ["/api/v1/me/", "/"])
def test_a_proxy_sign_in_that_loses_the_database_answers_503(proxy, path):  # noqa: F811
    answer = lost(signed("alice", "alice@corp.example.com"), path)

    assert (answer.status_code, answer["Retry-After"]) == (503, "5")
    if path.startswith("/api/"):
        assert answer.json() == {
            "detail": "The database did not answer: try again in a few seconds."
        }
    else:
        assert b"Try again in a few seconds" in answer.content


def test_an_openid_connect_sessions_check_that_loses_the_database_answers_503(provider):
    browser = Client()
    assert sign_on(browser).status_code == 302
    assert who(browser) == provider.claims["preferred_username"]
    due(browser)

    answer = lost(browser, "/")

    assert (answer.status_code, answer["Retry-After"]) == (503, "5")
    assert b"Try again in a few seconds" in answer.content
