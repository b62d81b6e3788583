"""The portal's account pages: log in, log out, change one's password; no mailed reset."""

import pytest
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(client):
    user = UserFactory(username="alice", email="alice@example.com")
    user.set_password("old-password-1")
    user.save()
    client.force_login(user)
    return user


def form(old, new, again=None):
    return {"old_password": old, "new_password1": new, "new_password2": again or new}


@pytest.mark.parametrize(
    "path",
    ["/accounts/password_reset/", "/accounts/password_reset/done/", "/accounts/reset/done/",
     "/accounts/reset/MQ/set-password/"],
)  # fmt: skip
def test_there_is_no_password_reset_by_mail(client, alice, path):
    """No mail goes out from here: a reset would promise a mail that never comes."""
    assert client.post(path, {"email": alice.email}).status_code == 404


def test_a_user_changes_their_password_and_logs_in_with_the_new_one(client, alice):
    page = client.get("/")
    assert 'href="/accounts/password/"' in page.text

    done = client.post("/accounts/password/", form("old-password-1", "new-Pass-4731"), follow=True)

    assert done.redirect_chain[-1][0] == "/accounts/password/done/"
    assert "Password changed" in done.text
    assert client.get("/").status_code == 200  # this session goes on
    fresh = Client()
    assert not fresh.login(username="alice", password="old-password-1")
    assert fresh.login(username="alice", password="new-Pass-4731")


def test_a_wrong_old_password_is_refused_on_its_field(client, alice):
    page = client.post("/accounts/password/", form("not-it", "new-Pass-4731"))

    assert page.status_code == 200
    assert "old_password" in page.context["form"].errors
    alice.refresh_from_db()
    assert alice.check_password("old-password-1")


def test_the_password_page_needs_a_login():
    page = Client().get("/accounts/password/")

    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/")
