"""The portal's account pages: log in, log out, change one's password; where the platform
sends no mail, no mailed reset (with a mail server: tests/test_accounts_mail.py)."""

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
    """Without a mail server (none in tests unless a test sets one) no mail goes out: a reset
    would promise a mail that never comes."""
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


@pytest.mark.parametrize(
    "new, said",
    [("short1", "too short"), ("password123", "too common"), ("73918264503", "entirely numeric"),
     ("alice-example", "too similar to the")],
)  # fmt: skip
def test_a_weak_new_password_is_refused_on_its_field_saying_why(client, alice, new, said):
    alice.email = "alice@example.com"
    alice.save()

    page = client.post("/accounts/password/", form("old-password-1", new))

    assert list(page.context["form"].errors) == ["new_password2"]
    assert said in " ".join(page.context["form"].errors["new_password2"])
    alice.refresh_from_db()
    assert alice.check_password("old-password-1")


@pytest.mark.parametrize("email, said", [("alice@example.com", "alice@example.com"), ("", "none")])
def test_the_password_page_shows_the_address_and_links_to_change_it(client, alice, email, said):
    alice.email = email
    alice.save(update_fields=["email"])

    page = client.get("/accounts/password/").text

    assert f'Your email address: {said}. <a href="/accounts/email/">Change it</a>' in page


def test_the_password_page_needs_a_login():
    page = Client().get("/accounts/password/")

    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/")
