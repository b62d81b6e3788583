"""The portal's account pages that need the platform's mail server (``MLSCHED_SMTP_URL``): a user
changes their own email address (``/accounts/email/``), which changes only once they open the link
mailed to the new address and confirm, and resets a forgotten password by a mailed link (Django's
own views, in the portal's templates). At most MAILS_AN_HOUR links an hour go to one address for a
reset, or for one account's change, and RESETS_AN_HOUR_FROM resets are mailed for one client
address; the address a change replaces is told of it. Without a mail server the address page says
that a platform admin sets addresses, and the reset pages are 404s: a reset would promise a mail
that never comes."""

import hashlib
import logging
from datetime import timedelta
from functools import wraps

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth
from django.contrib.auth.decorators import login_required
from django.core import signing
from django.core.cache import caches
from django.core.mail import send_mail
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse

from jobs import notify
from jobs.events import best_effort
from quotas import logins

log = logging.getLogger(__name__)

SALT = "mlsched.email-change"
# Links mailed to one address (a password reset's) or for one account (an address change's) an
# hour: someone who lost the first mail asks again, nobody floods a mailbox with them.
MAILS_AN_HOUR = 3
# Password resets asked from one client address an hour, whatever the addresses they name:
# someone asking them for many addresses is held back too.
RESETS_AN_HOUR_FROM = 10
LINK_LIFE = timedelta(days=3)  # how long a mailed link changes the address
SUBJECT = "Confirm your new email address on mlsched"
CHANGED_SUBJECT = "Your mlsched account's email address changed"
SPENT = "This link is spent: your address changed since it was sent."


def sends_mail() -> bool:
    """Whether the platform has a mail server to send through."""
    return bool(settings.MLSCHED_SMTP_URL)


def mail(request) -> dict[str, bool]:
    """The context processor: `sends_mail`, for the pages that offer what needs a mail (the
    login page's link to the password reset)."""
    return {"sends_mail": sends_mail()}


def needs_mail(view):
    """The view, or a 404 where the platform sends no mail."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not sends_mail():
            raise Http404("This platform sends no email.")
        return view(request, *args, **kwargs)

    return wrapped


class Refusal(Exception):
    """A link that changes nothing: its answer's status, and why, for people."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status, self.why = status, why


class EmailChangeForm(forms.Form):
    """A new address for the user, and their password, to show that it is them."""

    email = forms.EmailField(
        label="New email address", max_length=254,
        widget=forms.EmailInput(attrs={"autocomplete": "email"}),
    )  # fmt: skip
    password = forms.CharField(
        label="Your password", strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )  # fmt: skip

    def __init__(self, request, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.request, self.user = request, request.user

    def clean_email(self) -> str:
        email = self.cleaned_data["email"]
        if email == self.user.email:
            raise forms.ValidationError("That is your address already.")
        return email

    def clean_password(self) -> str:
        password = self.cleaned_data["password"]
        if not logins.password_checked(self.request, self.user, password):
            raise forms.ValidationError("Your password was entered incorrectly. Type it again.")
        return password


def within_rate(key: str, limit: int = MAILS_AN_HOUR) -> bool:
    """Count one more mail under `key` this hour (the throttle cache, Redis); whether it stays
    within `limit`. With the cache out of reach it does: a mail is never refused for want of
    its counter."""
    cache = caches["throttle"]
    key = "account-mail:" + hashlib.sha256(key.encode()).hexdigest()  # no address in Redis
    with best_effort("the account mails' rate"):
        cache.add(key, 0, 3600)
        return cache.incr(key) <= limit
    return True


def change_token(user, email: str) -> str:
    """The signed token of a change of the user's address to `email`. It names the address it
    replaces, so a change made since spends it."""
    return signing.dumps({"user": user.pk, "email": email, "was": user.email}, salt=SALT)


def mail_link(request, email: str) -> None:
    """Mail `email` the link that changes the user's address to it; smtplib's errors (an
    OSError, as a server out of reach is) raised."""
    token = change_token(request.user, email)
    link = absolute(request, reverse("email_confirm", args=[token]))
    context = {"user": request.user, "email": email, "link": link, "days": LINK_LIFE.days}
    body = render_to_string("portal/email_change_email.txt", context)
    send_mail(SUBJECT, body, settings.DEFAULT_FROM_EMAIL, [email])


def absolute(request, path: str) -> str:
    """A mailed link to the portal's `path`: under MLSCHED_PUBLIC_URL where the platform has
    one (the address its users reach it at, as notifications link to it), else the request's
    own host (one of ALLOWED_HOSTS)."""
    return notify.portal_url(path) or request.build_absolute_uri(path)


def change_asked(token: str, user) -> dict:
    """The change a link's token asks of the user's address (`email`, and `was`, the address
    it replaces); a Refusal for a token forged, expired or of another user."""
    try:
        change = signing.loads(token, salt=SALT, max_age=LINK_LIFE)
    except signing.SignatureExpired:
        raise Refusal(400, f"This link has expired: it works {LINK_LIFE.days} days.") from None
    except signing.BadSignature:
        raise Refusal(400, "This link is not one this platform sent: copy it whole.") from None
    if change["user"] != user.pk:
        raise Refusal(403, "This link was sent for another account: log in as it to open it.")
    return change


def change_email(user, change: dict) -> None:
    """Set the user's address to the change's, only if it is still the one the change
    replaces (a conditional update: two links opened at once change it once); a Refusal
    otherwise."""
    users = get_user_model().objects.filter(pk=user.pk, email=change["was"])
    if not users.update(email=change["email"]):
        raise Refusal(400, SPENT)
    user.email = change["email"]


@login_required
def email_change(request):
    """The user's address, and a new one: mailed a link that changes it once opened."""
    if not sends_mail():  # the page says so, and a post changes nothing
        status = 400 if request.method == "POST" else 200
        return render(request, "portal/email_change.html", status=status)
    form, status = EmailChangeForm(request), 200
    if request.method == "POST":
        form, status = EmailChangeForm(request, request.POST), 400
    if form.is_valid() and not within_rate(f"change:{request.user.pk}"):
        form.add_error(None, f"{MAILS_AN_HOUR} links were mailed for your account this hour: "
                       "open one of them, or try again later.")  # fmt: skip
        status = 429
    elif form.is_valid():
        try:
            mail_link(request, form.cleaned_data["email"])
        except OSError:  # smtplib.SMTPException is one
            form.add_error(None, "The mail server did not take the mail: try again later.")
            status = 503
        else:
            context = {"email": form.cleaned_data["email"], "days": LINK_LIFE.days}
            return render(request, "portal/email_sent.html", context)
    context = {"form": form, "days": LINK_LIFE.days}
    return render(request, "portal/email_change.html", context, status=status)


@login_required
def email_confirm(request, token):
    """A mailed link opened: a page that asks to confirm the change, and its post, which makes
    it. Opening the link alone changes nothing (a GET is safe): a mail client or a browser
    that fetches links ahead, in the user's session, makes no change."""
    try:
        change = change_asked(token, request.user)
        if request.method == "POST":
            change_email(request.user, change)
        elif request.user.email != change["was"]:
            raise Refusal(400, SPENT)
    except Refusal as refused:
        context = {"why": refused.why}
        return render(request, "portal/email_refused.html", context, status=refused.status)
    if request.method != "POST":
        return render(request, "portal/email_confirm.html", {"change": change})
    if change["was"]:
        tell_old_address(request, change)
    return render(request, "portal/email_changed.html")


def tell_old_address(request, change: dict) -> None:
    """Tell the address a change replaced that it no longer gets the account's mail: whoever
    changed it without its owner's knowing (a session left open) is seen. Best effort: the
    change is made, whether the mail server takes this or not."""
    context = {"user": request.user, "email": change["email"]}
    body = render_to_string("portal/email_changed_email.txt", context)
    try:
        send_mail(CHANGED_SUBJECT, body, settings.DEFAULT_FROM_EMAIL, [change["was"]])
    except OSError as error:
        log.warning("the old address of %s was not told of its change: %s", request.user, error)


class PasswordReset(auth.PasswordResetView):
    """Django's, its mailed link under MLSCHED_PUBLIC_URL where the platform has one (as
    ``absolute``; Django's own takes the request's host)."""

    template_name = "portal/password_reset_form.html"
    email_template_name = "portal/password_reset_email.txt"
    subject_template_name = "portal/password_reset_subject.txt"

    def form_valid(self, form):
        address = form.cleaned_data["email"].lower()
        client = f"reset-from:{logins.client_address(self.request)}"
        if not (within_rate(client, RESETS_AN_HOUR_FROM) and within_rate(f"reset:{address}")):
            # As if mailed: the page tells nothing of whether the address has an account.
            return HttpResponseRedirect(self.get_success_url())
        base = settings.MLSCHED_PUBLIC_URL.rstrip("/")
        self.extra_email_context = {"days": settings.PASSWORD_RESET_TIMEOUT // 86400,
                                    "public": base}  # fmt: skip
        return super().form_valid(form)


# Django's password reset, in the portal's templates; 404s where the platform sends no mail.
password_reset = needs_mail(PasswordReset.as_view())
password_reset_done = needs_mail(
    auth.PasswordResetDoneView.as_view(template_name="portal/password_reset_done.html")
)
password_reset_confirm = needs_mail(
    auth.PasswordResetConfirmView.as_view(template_name="portal/password_reset_confirm.html")
)
password_reset_complete = needs_mail(
    auth.PasswordResetCompleteView.as_view(template_name="portal/password_reset_complete.html")
)
