"""Sign-ins kept for security audits (SOC 2, ISO 27001 ask who signed in, when, from where and
how, and which attempts failed): a `SignIn` row for each login, by password (the portal's or
the admin's login form), through the authenticating proxy or with OpenID Connect, and for each
attempt that failed, with the name it gave, the client's address (`logins.client_address`)
and why it failed. Never a password, nor a token.

Django's auth signals write most of them (`logged_in`, `login_failed`, connected in
`QuotasConfig.ready`); the login guard's refusals (`logins.Guarded`) and the OpenID Connect
callback's failures before its user is known (`oidc.callback`) are written where they happen.
A row that cannot be written is logged, and the login goes on without it.

Platform admins read them in the admin (`quotas.admin.SignInAdmin`), at
`GET /api/v1/sign-ins/` (`quotas.api.SignInsView`) and with the CLI's `sign-ins`; retention
deletes them after MLSCHED_SIGN_IN_RETENTION_DAYS (jobs.retention)."""

import logging

from django.contrib import auth
from django.db import DatabaseError, transaction

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


def kept(request, method: str, username: str, *, user=None, reason: str = "") -> None:
    """Write down a sign-in: `user`'s, who signed in; without one, an attempt naming `username`
    that failed (the account of that name, where there is one) for `reason`, by default why
    that account is refused (`refusal`)."""
    address = client_address(request) if hasattr(request, "META") else ""
    try:
        with transaction.atomic():
            named = user or account(username)
            why = "" if user else reason or refusal(method, named)
            SignIn.objects.create(
                user=named, username=username[:150], method=method, succeeded=user is not None,
                address=address[:45], reason=why[:400],
            )  # fmt: skip
    except DatabaseError:
        log.warning("a %s sign-in of %r not kept", method, username[:150], exc_info=True)


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
