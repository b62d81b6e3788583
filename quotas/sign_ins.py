"""Sign-ins kept for security audits (SOC 2, ISO 27001 ask who signed in, when, from where and
how, and which attempts failed): a `SignIn` row for each login, by password (the portal's or
the admin's login form), through the authenticating proxy or with OpenID Connect, and for each
attempt that failed, with the name it gave, the client's address (`logins.client_address`)
and why it failed. Never a password, nor a token.

Django's auth signals write most of them (`logged_in`, `login_failed`, connected in
`QuotasConfig.ready`); the login guard's refusals (`logins.Guarded`) and the OpenID Connect
callback's failures before its user is known (`oidc.callback`) are written where they happen.
A row that cannot be written is logged, and the login goes on without it. The authenticating
proxy names its user in every request a browser makes (a page, its scripts, its polls): its
failed sign-ins are kept once per name, reason and client address in PROXY_FAILURE_EVERY, not
once per request (`repeated`, counted in the throttle cache as `logins` counts failed logins).

Platform admins read them in the admin (`quotas.admin.SignInAdmin`), at
`GET /api/v1/sign-ins/` (`quotas.api.SignInsView`) and with the CLI's `sign-ins`; retention
deletes them after MLSCHED_SIGN_IN_RETENTION_DAYS (jobs.retention)."""

import hashlib
import logging
from datetime import timedelta

from django.contrib import auth
from django.core.cache import caches
from django.db import DatabaseError, transaction

from jobs.events import best_effort
from quotas.logins import client_address
from quotas.models import SignIn

log = logging.getLogger(__name__)

Method = SignIn.Method
# The backend a session was logged in with (settings.AUTHENTICATION_BACKENDS), by its path.
METHODS = {
    "django.contrib.auth.backends.ModelBackend": Method.PASSWORD,
    "quotas.proxy_auth.ProxyBackend": Method.PROXY,
    "quotas.oidc.OidcBackend": Method.OIDC,
}
WRONG = "wrong password or unknown account"
REFUSED = "refused: too many failures"
INACTIVE = "inactive account"
UNKNOWN = "no such account, none made"
PASSWORD_ACCOUNT = "a password account: not taken over by sign-on"
# The proxy's failed sign-ins of one name, for one reason, from one address: one row in this long.
PROXY_FAILURE_EVERY = timedelta(minutes=10)


def kept(request, method: str, username: str, *, user=None, reason: str = "") -> None:
    """Write down a sign-in: `user`'s, who signed in; without one, an attempt naming `username`
    that failed (the account of that name, where there is one) for `reason`, by default why
    that account is refused (`refusal`)."""
    address = client_address(request) if hasattr(request, "META") else ""
    try:
        with transaction.atomic():
            named = user or account(username)
            why = "" if user else reason or refusal(method, named)
            if repeated(method, username, why, address):
                return
            SignIn.objects.create(
                user=named, username=username[:150], method=method, succeeded=user is not None,
                address=address[:45], reason=why[:400],
            )  # fmt: skip
    except DatabaseError:
        log.warning("a %s sign-in of %r not kept", method, username[:150], exc_info=True)


def repeated(method: str, username: str, reason: str, address: str) -> bool:
    """Whether a failed sign-in through the proxy is a repeat, not to keep: one with that name,
    reason and address was kept within PROXY_FAILURE_EVERY (the first kept starts that time).
    Never a sign-in that succeeded nor another method's; never with the throttle cache out of
    reach (each failure is kept then)."""
    if method != Method.PROXY or not reason:
        return False
    parts = "\0".join([username, reason, address]).encode()
    key = "proxy-sign-in-failed:" + hashlib.sha256(parts).hexdigest()  # no name nor address
    with best_effort("the proxy's failed sign-ins' count"):
        return not caches["throttle"].add(key, 1, int(PROXY_FAILURE_EVERY.total_seconds()))
    return False


def account(username: str):
    """The account of that name (None: none)."""
    users = auth.get_user_model()._default_manager
    return users.filter(**{users.model.USERNAME_FIELD: username}).first() if username else None


def refusal(method: str, user) -> str:
    """Why a sign-in by `method` naming the account `user` (None: none) was refused."""
    if user is not None and not user.is_active:
        return INACTIVE
    if method == Method.PASSWORD:
        return WRONG
    return UNKNOWN if user is None else PASSWORD_ACCOUNT


def logged_in(sender, request, user, **kwargs) -> None:
    """`user_logged_in`: how, from the backend the session was logged in with (without a
    session, the one the user was authenticated by)."""
    session = getattr(request, "session", None)
    backend = session.get(auth.BACKEND_SESSION_KEY) if session is not None else None
    method = METHODS.get(backend or getattr(user, "backend", ""), Method.PASSWORD)
    kept(request, method, user.get_username(), user=user)


def login_failed(sender, credentials, request=None, **kwargs) -> None:
    """`user_login_failed`: the name the credentials give (the password never read), and how
    from what they hold: the proxy's `remote_user`, OpenID Connect's verified claims, or a
    login form's username."""
    if "oidc_claims" in credentials:
        method, username = Method.OIDC, getattr(credentials["oidc_claims"], "username", "")
    elif "remote_user" in credentials:
        method, username = Method.PROXY, credentials["remote_user"]
    else:
        method, username = Method.PASSWORD, credentials.get("username")
    kept(request, method, username if isinstance(username, str) else "")
