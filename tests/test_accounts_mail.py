"""The account pages that need the platform's mail server: a user changes their own email
address, which changes only once they open the link mailed to the new one, and resets a
forgotten password by a mailed link. A real SMTP server (aiosmtpd) in a thread plays the mail
server (tests/jobs/test_notify_email.py's `mailbox`)."""

# ruff: noqa: F811 (the mailbox fixture, imported, is the tests' argument)

import json
import re
import time

import pytest
from django.core import mail, signing
from django.test import Client

from quotas import accounts
from tests.factories import UserFactory
from tests.jobs.test_form_errors_a11y import Page, assert_tied
from tests.jobs.test_notify_email import mailbox  # noqa: F401 (a fixture)
from tests.test_accounts import alice  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

LINK = re.compile(r"http://testserver(/accounts/\S+/)")
DAY = 24 * 3600


def change(client, email, password="old-password-1"):
    return client.post("/accounts/email/", {"email": email, "password": password})


def link_in(message) -> str:
    """The path of the one link a mail's body gives."""
    (path,) = LINK.findall(message.get_content())
    return path


def confirm(client, path):
    """Open a mailed link and confirm the change it asks for."""
    client.get(path)
    return client.post(path)


def email_of(user) -> str:
    user.refresh_from_db()
    return user.email


def test_an_email_change_mails_a_link_to_the_new_address_and_changes_it_once_opened(
    client, alice, mailbox
):
    sent = change(client, "alice@new.example.com")
    unchanged = email_of(alice)
    ((sender, to, message),) = mailbox.messages
    opened = confirm(client, link_in(message))

    assert sent.status_code == 200
    assert "A link is mailed to alice@new.example.com" in sent.text
    assert "changes only once you open it" in sent.text and "3 days" in sent.text
    assert unchanged == "alice@example.com"
    assert (sender, to) == ("mlsched@mlsched.example.com", ["alice@new.example.com"])
    assert message["Subject"] == "Confirm your new email address on mlsched"
    assert opened.status_code == 200
    assert "Your email address is now alice@new.example.com" in opened.text
    assert email_of(alice) == "alice@new.example.com"


def test_opening_the_link_alone_changes_nothing_and_asks_to_confirm(client, alice, mailbox):
    change(client, "alice@new.example.com")
    ((_, _, message),) = mailbox.messages

    opened = client.get(link_in(message))

    assert opened.status_code == 200
    assert "Your address is alice@example.com. Confirm to make it alice@new.example.com" in (
        opened.text
    )
    assert '<form method="post">' in opened.text
    assert "Change my address to alice@new.example.com" in opened.text
    assert email_of(alice) == "alice@example.com"
    assert len(mailbox.messages) == 1  # the old address is told of a change made, not asked


def test_a_wrong_password_is_refused_on_its_field_and_mails_nothing(client, alice, mailbox):
    refused = change(client, "alice@new.example.com", password="not-it")

    assert refused.status_code == 400
    assert list(refused.context["form"].errors) == ["password"]
    assert_tied(Page(refused.text), "password", "entered incorrectly")
    assert mailbox.tries == 0
    assert email_of(alice) == "alice@example.com"


def test_wrong_passwords_at_an_address_change_count_as_failed_logins(
    client, alice, mailbox, settings
):
    settings.MLSCHED_LOGIN_FAILURES = 3
    [change(client, "alice@new.example.com", password="not-it") for _ in range(3)]

    refused = change(client, "alice@new.example.com")

    assert refused.status_code == 400
    assert "Too many failed logins for this account from your address" in refused.text
    assert mailbox.tries == 0


def test_the_same_address_is_refused_on_its_field(client, alice, mailbox):
    refused = change(client, "alice@example.com")

    assert refused.status_code == 400
    assert refused.context["form"].errors == {"email": ["That is your address already."]}
    assert mailbox.tries == 0


def test_a_tampered_link_is_refused_and_changes_nothing(client, alice):
    payload, stamp, signature = accounts.change_token(alice, "alice@new.example.com").split(":")
    evil = {"user": alice.pk, "email": "evil@example.com", "was": "alice@example.com"}
    # Another address under the link's signature, and a token this platform signed for
    # another use (no salt, or another).
    changed = signing.b64_encode(json.dumps(evil, separators=(",", ":")).encode()).decode()
    tampered = [f"{changed}:{stamp}:{signature}", signing.dumps(evil)]

    answers = [
        opened(f"/accounts/email/{token}/")
        for token in tampered
        for opened in (client.get, client.post)
    ]

    assert [answer.status_code for answer in answers] == [400, 400, 400, 400]
    assert all("This link is not one this platform sent" in answer.text for answer in answers)
    assert email_of(alice) == "alice@example.com"


def signed_ago(monkeypatch, user, email: str, seconds: int) -> str:
    """A change token signed `seconds` ago."""
    then = int(time.time()) - seconds
    with monkeypatch.context() as patched:
        patched.setattr(signing.TimestampSigner, "timestamp", lambda self: signing.b62_encode(then))
        return accounts.change_token(user, email)


def test_an_expired_link_is_refused_and_changes_nothing(client, alice, monkeypatch):
    token = signed_ago(monkeypatch, alice, "alice@new.example.com", 3 * DAY + 60)

    refused = confirm(client, f"/accounts/email/{token}/")

    assert refused.status_code == 400
    assert "This link has expired: it works 3 days." in refused.text
    assert email_of(alice) == "alice@example.com"


def test_a_link_still_works_near_the_end_of_its_three_days(client, alice, monkeypatch):
    token = signed_ago(monkeypatch, alice, "alice@new.example.com", 3 * DAY - 60)

    opened = confirm(client, f"/accounts/email/{token}/")

    assert opened.status_code == 200
    assert email_of(alice) == "alice@new.example.com"


def test_another_users_link_is_refused(client, alice):
    bob = UserFactory(username="bob", email="bob@example.com")
    token = accounts.change_token(bob, "alice@new.example.com")

    refused = confirm(client, f"/accounts/email/{token}/")

    assert refused.status_code == 403
    assert "sent for another account" in refused.text
    assert (email_of(alice), email_of(bob)) == ("alice@example.com", "bob@example.com")


def test_a_link_spent_by_a_change_since_is_refused(client, alice, mailbox):
    change(client, "alice@first.example.com")
    change(client, "alice@second.example.com")
    first, second = (link_in(message) for _, _, message in mailbox.messages)

    confirm(client, second)
    refused = [client.get(first), client.post(first)]

    assert [answer.status_code for answer in refused] == [400, 400]
    assert all("This link is spent: your address changed since" in a.text for a in refused)
    assert email_of(alice) == "alice@second.example.com"


def test_a_mail_server_refusal_shows_the_form_with_an_error_and_no_500(client, alice, mailbox):
    mailbox.refusal = "550 no"

    refused = change(client, "alice@new.example.com")

    assert refused.status_code == 503
    assert "The mail server did not take the mail: try again later." in refused.text
    assert 'name="email"' in refused.text  # the form, to try again
    assert (mailbox.tries, mailbox.messages) == (1, [])
    assert email_of(alice) == "alice@example.com"


def test_without_a_mail_server_the_page_says_so_and_a_post_changes_nothing(client, alice):
    page = client.get("/accounts/email/")
    posted = change(client, "alice@new.example.com")

    assert page.status_code == 200
    assert "This platform sends no email" in page.text and "A platform admin sets" in page.text
    assert 'name="password"' not in page.text
    assert posted.status_code == 400
    assert mail.outbox == []
    assert email_of(alice) == "alice@example.com"


def test_a_password_reset_mails_a_link_that_sets_a_new_password(alice, mailbox):
    browser = Client()  # not logged in: the password is forgotten
    asked = browser.post("/accounts/password_reset/", {"email": "alice@example.com"}, follow=True)
    ((_, to, message),) = mailbox.messages
    form = browser.get(link_in(message), follow=True)  # Django moves the token to the session
    new = {"new_password1": "new-Pass-4731", "new_password2": "new-Pass-4731"}
    done = browser.post(form.redirect_chain[-1][0], new, follow=True)

    assert asked.redirect_chain[-1][0] == "/accounts/password_reset/done/"
    assert to == ["alice@example.com"] and message["Subject"] == "Set a new mlsched password"
    assert form.status_code == 200 and 'name="new_password1"' in form.text
    assert done.redirect_chain[-1][0] == "/accounts/reset/done/" and "Password set" in done.text
    assert not Client().login(username="alice", password="old-password-1")
    assert Client().login(username="alice", password="new-Pass-4731")


def test_an_unknown_address_gets_the_same_done_page_and_no_mail(alice, mailbox):
    known = Client().post("/accounts/password_reset/", {"email": "alice@example.com"})
    unknown = Client().post("/accounts/password_reset/", {"email": "nobody@example.com"})

    assert known["Location"] == unknown["Location"] == "/accounts/password_reset/done/"
    assert [to for _, to, _ in mailbox.messages] == [["alice@example.com"]]


@pytest.mark.parametrize("smtp_url, links", [("smtp://127.0.0.1", True), ("", False)])
def test_the_login_page_links_to_the_reset_only_when_the_platform_sends_mail(
    settings, smtp_url, links
):
    settings.MLSCHED_SMTP_URL = smtp_url

    page = Client().get("/accounts/login/").text

    assert ('href="/accounts/password_reset/"' in page) is links
    assert ("A platform admin sets a new one." in page) is not links


@pytest.mark.parametrize("path", ["/accounts/email/", "/accounts/email/a-token/"])
def test_the_email_pages_need_a_login(settings, path):
    settings.MLSCHED_SMTP_URL = "smtp://127.0.0.1"

    page = Client().get(path)

    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/")


def test_mailed_links_are_under_the_platforms_public_address_not_the_requests_host(
    client, alice, mailbox, settings
):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"
    settings.ALLOWED_HOSTS = ["testserver", "evil.example"]  # a host the request may name

    change(client, "alice@new.example.com")
    Client().post("/accounts/password_reset/", {"email": "alice@example.com"},
                  HTTP_HOST="evil.example")  # fmt: skip

    bodies = [message.get_content() for _, _, message in mailbox.messages]
    assert len(bodies) == 2
    for body in bodies:
        (link,) = re.findall(r"https?://\S+", body)
        assert link.startswith("https://mlsched.example.com/accounts/")


def test_the_tokens_page_links_an_account_without_an_address_to_setting_it(client, mailbox):
    bob = UserFactory(username="bob", email="")
    client.force_login(bob)

    page = client.get("/tokens/").text

    assert 'no email address (<a href="/accounts/email/">set it</a>)' in page


def test_a_fourth_link_asked_for_one_account_in_an_hour_is_a_429_and_mails_nothing(
    client, alice, mailbox
):
    asked = [change(client, f"alice@new{i}.example.com").status_code for i in range(4)]

    assert asked == [200, 200, 200, 429]
    assert len(mailbox.messages) == 3
    assert "3 links were mailed for your account this hour" in change(client, "a@b.example").text


def test_a_fourth_reset_of_one_address_in_an_hour_mails_nothing_and_says_the_same(alice, mailbox):
    answers = [
        Client().post("/accounts/password_reset/", {"email": email})
        for email in ["alice@example.com"] * 3 + ["ALICE@example.com"]
    ]

    assert {answer["Location"] for answer in answers} == {"/accounts/password_reset/done/"}
    assert len(mailbox.messages) == 3


def test_the_old_address_is_told_once_the_change_is_made(client, alice, mailbox):
    change(client, "alice@new.example.com")
    ((_, _, link),) = mailbox.messages

    confirm(client, link_in(link))

    (_, to, told) = mailbox.messages[1]
    assert to == ["alice@example.com"]
    assert told["Subject"] == "Your mlsched account's email address changed"
    assert "is now alice@new.example.com" in told.get_content()


def test_an_eleventh_reset_from_one_client_in_an_hour_mails_nothing_whatever_the_address(
    mailbox,
):
    for n in range(12):
        UserFactory(username=f"user{n}", email=f"user{n}@example.com")

    answers = [
        Client(REMOTE_ADDR="10.0.0.1").post(
            "/accounts/password_reset/", {"email": f"user{n}@example.com"}
        )
        for n in range(11)
    ]
    Client(REMOTE_ADDR="10.0.0.2").post(
        "/accounts/password_reset/", {"email": "user11@example.com"}
    )

    assert {answer["Location"] for answer in answers} == {"/accounts/password_reset/done/"}
    assert [to for _, (to,), _ in mailbox.messages] == [
        *(f"user{n}@example.com" for n in range(10)),
        "user11@example.com",
    ]
