"""Password guessing, slowed down at the login pages (the portal's and the admin's), as
django-axes does for a Django site: after MLSCHED_LOGIN_FAILURES failed logins of one account
from one client address within WINDOW, that account's logins from there are refused, the
password unchecked, until the window ends; after SPRAY times as many failures from one
address whatever the accounts (one password tried against many), every login from there is.
A login that succeeds forgets its account's failures from its address. The account is not
locked for everyone: someone guessing from elsewhere does not keep its owner out. The pages
behind a login that ask for the password (its change, an address change) count with the
login's, so that a session someone else holds does not let them guess it.

The client's address is the request's peer, or behind MLSCHED_PROXIES proxies that each add
the address they were reached from to X-Forwarded-For, the one the outermost proxy saw
(`client_address`, as Django REST framework's NUM_PROXIES reads it). The counts are kept in
the throttle cache (Redis), under hashes; with it out of reach nothing is refused."""

import hashlib
from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth
from django.contrib.auth.forms import AuthenticationForm, PasswordChangeForm
from django.core.cache import caches

from jobs.events import best_effort

WINDOW = timedelta(minutes=15)  # failures counted together, and how long they refuse logins
SPRAY = 10  # failures from one address, whatever the accounts, as many times an account's


def client_address(request) -> str:
    """Where the request came from: its peer, or the address the outermost of
    MLSCHED_PROXIES proxies was reached from (the one each proxy appends to X-Forwarded-For:
    the entries before it are the client's to write)."""
    proxies = settings.MLSCHED_PROXIES
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    if proxies and forwarded[-1]:
        return forwarded[-min(proxies, len(forwarded))]
    return request.META.get("REMOTE_ADDR", "")


def _key(*parts: str) -> str:
    return "login-failures:" + hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _counts(username: str, address: str) -> dict[str, int]:
    """The keys a failure counts under, each with how many failures refuse a login."""
    limit = settings.MLSCHED_LOGIN_FAILURES
    return {_key("account", username, address): limit, _key("address", address): limit * SPRAY}


def refused(username: str, address: str) -> str:
    """Why a login of `username` from `address` is refused unchecked ("": it is not)."""
    if not settings.MLSCHED_LOGIN_FAILURES:
        return ""
    counts = _counts(username, address)
    with best_effort("the failed logins' count"):
        reached = caches["throttle"].get_many(list(counts))
        minutes = int(WINDOW.total_seconds() // 60)
        account, spray = (reached.get(key, 0) >= limit for key, limit in counts.items())
        if spray:
            return (
                f"Too many failed logins from your address: try again in {minutes} minutes at most."
            )
        if account:
            return (
                "Too many failed logins for this account from your address: "
                f"try again in {minutes} minutes at most, or have your password reset."
            )
    return ""


def failed(username: str, address: str) -> None:
    """Count a failed login; the first of a window starts it."""
    if not settings.MLSCHED_LOGIN_FAILURES:
        return
    cache = caches["throttle"]
    with best_effort("the failed logins' count"):
        for key in _counts(username, address):
            cache.add(key, 0, int(WINDOW.total_seconds()))
            cache.incr(key)


def succeeded(username: str, address: str) -> None:
    """Forget the account's failures from the address."""
    with best_effort("the failed logins' count"):
        caches["throttle"].delete(_key("account", username, address))


def password_checked(request, user, password: str) -> bool:
    """Whether `password` is the user's, at a page behind a login that asks for it (its
    change, an address change): a failure counts as a failed login of the account from the
    client, and past them the password is not checked (a ValidationError saying why), so that
    a session someone else holds does not let them guess it either."""
    username, address = user.get_username(), client_address(request)
    if why := refused(username, address):
        raise forms.ValidationError(why, code="locked")
    if user.check_password(password):
        return True
    failed(username, address)
    return False


class Guarded:
    """A login form (Django's, or the admin's) that refuses a login past its failures before
    checking the password, and counts each failure. A refusal is kept as a failed sign-in
    (quotas/sign_ins.py, as Django's auth signals keep the form's own)."""

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        address = client_address(self.request)
        if why := refused(username, address):
            from quotas import sign_ins  # sign_ins imports this module

            sign_ins.kept(self.request, sign_ins.Method.PASSWORD, username, reason=sign_ins.REFUSED)
            raise forms.ValidationError(why, code="locked")
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            failed(username, address)
            raise
        succeeded(username, address)
        return cleaned


class LoginForm(Guarded, AuthenticationForm):
    pass


class AdminLoginForm(Guarded, AdminAuthenticationForm):
    pass


class GuardedPasswordChange(PasswordChangeForm):
    """Django's, the old password checked as ``password_checked`` does."""

    def __init__(self, user, *args, request=None, **kwargs):
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self) -> str:
        old = self.cleaned_data["old_password"]
        if not password_checked(self.request, self.user, old):
            raise forms.ValidationError(
                self.error_messages["password_incorrect"], code="password_incorrect"
            )
        return old


class PasswordChange(auth.PasswordChangeView):
    form_class = GuardedPasswordChange

    def get_form_kwargs(self):
        return super().get_form_kwargs() | {"request": self.request}


class Login(auth.LoginView):
    """The portal's login page: a login refused for its failures is a 429. Where OpenID
    Connect sign-on is on (quotas/oidc.py), it links to it above the password form."""

    form_class = LoginForm

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        if settings.MLSCHED_OIDC_ISSUER:
            context["sign_on_name"] = settings.MLSCHED_OIDC_NAME
        return context

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if any(error.code == "locked" for error in form.non_field_errors().as_data()):
            response.status_code = 429
        return response
