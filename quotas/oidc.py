"""Single sign-on spoken by the web app itself: OpenID Connect's authorization code flow with
PKCE, with an identity provider (Keycloak, Authentik, Dex, Okta, Entra ID) whose issuer URL is
MLSCHED_OIDC_ISSUER and where the portal is the client MLSCHED_OIDC_CLIENT_ID (confidential,
with MLSCHED_OIDC_CLIENT_SECRET, or public without it).

The login page's "Sign in with ..." link (`login`) keeps in the session a random state, a
nonce, a PKCE code verifier and where to go after, and sends the browser to the provider's
authorization endpoint (read from its discovery document, `{issuer}/.well-known/openid-
configuration`, kept an hour). The provider sends it back to `callback` with a code and the
state: a state that is not one of the session's pending logins' is refused (a login is spent
at its answer, whatever it is, and a state that is none of them spends them all: up to
MAX_PENDING are kept, a login started in each of several tabs), the code is exchanged at the
token endpoint with the verifier, and the ID token is believed only when signed by one of the
provider's keys (its JWKS, fetched again once for a key id it does not know) with an
asymmetric algorithm the provider lists, for this client, from this issuer, current and with
the session's nonce.

The ID token's MLSCHED_OIDC_USERNAME_CLAIM (`preferred_username`) names the account, which is
made at the first login unless MLSCHED_AUTH_CREATES_USERS is off (no usable password: its
user signs in at the provider; no team, as the proxy's sign-on makes them); `email`, unless
the provider says it is not verified, is the account's address at each login; and where
MLSCHED_OIDC_GROUPS_CLAIM names the claim of the user's groups, teams' sign-on groups make
their memberships as the proxy's groups header does (`sign_on.join_groups`). The claim
names an account the provider controls: one its users cannot change themselves. A name
Django would not take for a username, an account that is inactive, or one with a usable
password (a password login's, which a name at the provider must not take over), is not
logged in.

Logging out of a session the provider signed in ends its session there too, where the
provider has an end_session_endpoint (`Logout`). The provider unreachable or erring, or an
answer that does not hold, is the login page saying the sign-on failed, nobody logged in (a
failed sign-in kept, quotas/sign_ins.py); password logins stay, for platform admins without an
account at the provider."""

import base64
import hashlib
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from importlib import import_module
from urllib.parse import quote_plus, urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.views import LogoutView
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.http import url_has_allowed_host_and_scheme

from mlsched_site.middleware import origin
from quotas import logins, sign_ins, vault
from quotas.models import OidcSession, group_names
from quotas.sign_on import configured, groups_pushed, is_username, join_groups

log = logging.getLogger(__name__)

BACKEND = "quotas.oidc.OidcBackend"
PENDING = "mlsched-oidc-pending"  # the session's key: the logins sent to the provider, by state
MAX_PENDING = 5  # a session's logins pending at once (tabs); a sixth drops the oldest
ID_TOKEN = "mlsched-oidc-id-token"  # the session's key: the ID token it logged in with
# The session's key: when its OidcSession is next checked (epoch seconds; None: never), which
# spares the rows of sessions not due a read (quotas/oidc_sessions.py).
RECHECK_AT = "mlsched-oidc-recheck-at"
TIMEOUT_S = 10  # a request to the provider
KEPT_S = 3600  # how long its discovery document and keys are believed
LEEWAY_S = 60  # clocks' difference allowed for the ID token's times
# The algorithms an ID token may be signed with, of those the provider lists: a public key's,
# never `none` nor an HMAC keyed with the client secret.
ASYMMETRIC = {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA"}  # fmt: skip
STATE_REFUSED = (
    "This sign-on was not started in this browser, or it was used already: sign in again."
)

_fetched: dict[str, tuple[float, dict]] = {}


class SignOnFailed(Exception):
    """The sign-on cannot go on: `reason` for the log, `shown` on the login page, `status`."""

    def __init__(self, reason: str, status: int = 403, shown: str = ""):
        super().__init__(reason)
        self.reason, self.status = reason, status
        self.shown = shown or f"Signing in with {settings.MLSCHED_OIDC_NAME} failed."


@dataclass(frozen=True)
class Verified:
    """Who a verified ID token says signed in: what `OidcBackend` logs in, and only that."""

    username: str
    email: str | None
    groups: set[str]


def enabled() -> bool:
    return bool(settings.MLSCHED_OIDC_ISSUER)


def fetched(url: str, fresh: bool = False) -> dict:
    """The JSON document at `url` on the provider, kept KEPT_S (`fresh`: fetched again); a
    failure is not kept."""
    kept = _fetched.get(url)
    if kept and not fresh and time.monotonic() - kept[0] < KEPT_S:
        return kept[1]
    try:
        answer = requests.get(url, timeout=TIMEOUT_S, headers={"Accept": "application/json"})
        answer.raise_for_status()
        document = answer.json()
    except (requests.RequestException, ValueError) as error:
        raise SignOnFailed(f"{url}: {error}", status=502) from None
    if not isinstance(document, dict):
        raise SignOnFailed(f"{url}: no JSON object", status=502)
    _fetched[url] = (time.monotonic(), document)
    return document


def discovery() -> dict:
    """The provider's discovery document, which must be the configured issuer's."""
    issuer = settings.MLSCHED_OIDC_ISSUER
    document = fetched(issuer.rstrip("/") + "/.well-known/openid-configuration")
    if document.get("issuer") != issuer:
        raise SignOnFailed(f"the discovery document's issuer is {document.get('issuer')!r}", 502)
    for endpoint in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(document.get(endpoint), str):
            raise SignOnFailed(f"the discovery document has no {endpoint}", 502)
    return document


def with_query(url: str, parameters: dict[str, str]) -> str:
    """`url` with `parameters` added to its query."""
    return url + ("&" if "?" in url else "?") + urlencode(parameters)


def challenge(verifier: str) -> str:
    """PKCE's S256 code challenge of a code verifier."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def on_or_404() -> None:
    if not enabled():
        raise Http404("OpenID Connect sign-on is off")


def redirect_uri(request) -> str:
    return request.build_absolute_uri(reverse("oidc_callback"))


def safe_next(request, where: str) -> str:
    """Where a login may go after: `where` on this site, else LOGIN_REDIRECT_URL."""
    safe = url_has_allowed_host_and_scheme(
        where, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return where if safe else resolve_url(settings.LOGIN_REDIRECT_URL)


def refused(request, why: str, status: int):
    """The login page, saying why signing in did not happen."""
    page = logins.Login.as_view(extra_context={"sign_on_refused": why})(request)
    page.status_code = status
    return page


def failed(request, line: str) -> None:
    """A sign-on that failed before a verified ID token named its user: logged, and kept as a
    failed sign-in naming nobody, the line its reason (one that fails after, Django's
    `user_login_failed` keeps with the name)."""
    log.warning("%s", line)
    sign_ins.kept(request, sign_ins.Method.OIDC, "", reason=line)


def login(request):
    """Send the browser to the provider's authorization endpoint, the login pending in the
    session beside the MAX_PENDING - 1 last others."""
    on_or_404()
    try:
        endpoint = discovery()["authorization_endpoint"]
    except SignOnFailed as failure:
        log.warning("OpenID Connect sign-on not started: %s", failure.reason)
        return refused(request, failure.shown, failure.status)
    pending = {
        "state": secrets.token_urlsafe(32),
        "nonce": secrets.token_urlsafe(32),
        "verifier": secrets.token_urlsafe(64),
        "next": safe_next(request, request.GET.get("next", "")),
    }
    others = list(pending_logins(request.session.get(PENDING)).items())[1 - MAX_PENDING :]
    request.session[PENDING] = dict(others) | {pending["state"]: pending}
    scopes = settings.MLSCHED_OIDC_SCOPES.split()
    return HttpResponseRedirect(
        with_query(
            endpoint,
            {
                "response_type": "code",
                "client_id": settings.MLSCHED_OIDC_CLIENT_ID,
                "redirect_uri": redirect_uri(request),
                "scope": " ".join(scopes if "openid" in scopes else ["openid", *scopes]),
                "state": pending["state"],
                "nonce": pending["nonce"],
                "code_challenge": challenge(pending["verifier"]),
                "code_challenge_method": "S256",
            },
        )
    )


def callback(request):
    """Where the provider sends the browser back: the user its ID token names logged in, and
    sent where the login was to go; or the login page saying why not."""
    on_or_404()
    pending = answered(request.session, request.GET.get("state", ""))
    if pending is None:
        failed(request, "OpenID Connect callback refused: its state is not the session's")
        return refused(request, STATE_REFUSED, 400)
    if error := request.GET.get("error"):
        said = request.GET.get("error_description", "")[:300] or error[:100]
        failed(request, f"the identity provider refused the sign-on: {error[:100]} {said}")
        why = f"{settings.MLSCHED_OIDC_NAME} refused the sign-on: {said}"
        return refused(request, why, 403)
    try:
        tokens = exchanged(request, request.GET.get("code", ""), pending["verifier"])
        claims = checked(tokens["id_token"])
        if not constant_time_compare(str(claims.get("nonce", "")), pending["nonce"]):
            raise SignOnFailed("the ID token's nonce is not the login's")
        signed = user_of(claims)
    except SignOnFailed as failure:
        failed(request, f"OpenID Connect sign-on failed: {failure.reason}")
        return refused(request, failure.shown, failure.status)
    user = auth.authenticate(request, oidc_claims=signed)
    if user is None:
        why = f"{signed.username} cannot log in here: a platform admin can tell you why."
        return refused(request, why, 403)
    auth.login(request, user, backend=BACKEND)
    request.session[ID_TOKEN] = tokens["id_token"]
    begun(request, claims, tokens.get("refresh_token", ""))
    if settings.MLSCHED_OIDC_GROUPS_CLAIM and not groups_pushed():
        join_groups(user, signed.groups)
    return HttpResponseRedirect(pending["next"])


def begun(request, claims: dict, refresh_token: str) -> None:
    """The session just signed in kept as the provider's (`OidcSession`): its subject and
    `sid`, for a back-channel logout, and its refresh token, to check it again with the
    provider in MLSCHED_OIDC_RECHECK_S (quotas/oidc_sessions.py); the user's rows of sessions
    the session store no longer has (expired, or flushed without a logout) cleared."""
    recheck_s = settings.MLSCHED_OIDC_RECHECK_S
    now = timezone.now()
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    kept = OidcSession.objects.filter(user=request.user).values_list("session_key", flat=True)
    OidcSession.objects.filter(session_key__in=[k for k in kept if not store.exists(k)]).delete()
    row, _ = OidcSession.objects.update_or_create(
        # A login of the user the session has logged in already keeps its key.
        session_key=request.session.session_key,
        defaults={
            "user": request.user,
            "subject": claims["sub"][:255],
            "sid": str(claims.get("sid") or "")[:255],
            "refresh_token": vault.seal(refresh_token) if refresh_token else "",
            "recheck_at": now + timedelta(seconds=recheck_s)
            if refresh_token and recheck_s
            else None,
        },
    )
    request.session[RECHECK_AT] = row.recheck_at.timestamp() if row.recheck_at else None


def answered(session, state: str) -> dict | None:
    """The session's pending login of `state`, spent (the others kept); None where it is no
    pending login's, which spends them all."""
    kept = pending_logins(session.pop(PENDING, None))
    pending = next((p for p in kept.values() if constant_time_compare(state, p["state"])), None)
    if pending is not None and state:
        session[PENDING] = {other: p for other, p in kept.items() if p is not pending}
        return pending
    return None


def pending_logins(kept) -> dict[str, dict]:
    """The pending logins a session keeps, by state (none from a session of an earlier release,
    which kept one alone)."""
    if not isinstance(kept, dict):
        return {}
    return {state: p for state, p in kept.items() if isinstance(p, dict) and "state" in p}


def exchanged(request, code: str, verifier: str) -> dict:
    """The token endpoint's answer for `code`, with PKCE's verifier: its ID token and, where
    the provider gives one, a refresh token."""
    if not code:
        raise SignOnFailed("the callback has no code", status=400)
    grant = {"grant_type": "authorization_code", "code": code,
             "redirect_uri": redirect_uri(request), "code_verifier": verifier}  # fmt: skip
    return tokens_for(grant)


class TokenRefused(SignOnFailed):
    """The token endpoint refused the grant (a 4xx answer: `invalid_grant` for a refresh token
    whose session the provider ended), where a 5xx or no answer at all is the provider failing."""


def tokens_for(grant: dict[str, str], id_token_needed: bool = True) -> dict:
    """The token endpoint's answer to `grant`, the client authenticated with HTTP Basic where it
    has a secret, else named in the body (a public client); its `id_token` a string, where
    needed, and its `refresh_token` one or absent."""
    client_id, secret = settings.MLSCHED_OIDC_CLIENT_ID, settings.MLSCHED_OIDC_CLIENT_SECRET
    basic = (quote_plus(client_id), quote_plus(secret)) if secret else None
    body = grant if secret else {**grant, "client_id": client_id}
    endpoint = discovery()["token_endpoint"]
    try:
        answer = requests.post(endpoint, data=body, auth=basic, timeout=TIMEOUT_S,
                               headers={"Accept": "application/json"})  # fmt: skip
    except requests.RequestException as error:
        raise SignOnFailed(f"the token endpoint: {error}", status=502) from None
    if answer.status_code != 200:
        said = f"the token endpoint answered {answer.status_code}: {answer.text[:300]}"
        raise (TokenRefused if 400 <= answer.status_code < 500 else SignOnFailed)(said, 502)
    try:
        tokens = answer.json()
    except ValueError:
        tokens = None
    if not isinstance(tokens, dict) or (
        id_token_needed and not isinstance(tokens.get("id_token"), str)
    ):
        raise SignOnFailed("the token endpoint's answer has no ID token", status=502)
    if not isinstance(tokens.get("refresh_token", ""), str):
        raise SignOnFailed("the token endpoint's refresh token is no string", status=502)
    return tokens


def algorithms(document: dict) -> list[str]:
    """The asymmetric algorithms the provider lists for ID tokens (RS256 where it lists none,
    OpenID Connect's default)."""
    listed = document.get("id_token_signing_alg_values_supported") or ["RS256"]
    return [name for name in listed if name in ASYMMETRIC]


def signing_key(document: dict, kid: str | None, algorithm: str):
    """The provider's public key a token names by `kid` (without one, its only key), for
    `algorithm`; its keys fetched again once where none is that key."""
    for fresh in (False, True):
        keys = fetched(document["jwks_uri"], fresh=fresh).get("keys")
        keys = [key for key in keys if isinstance(key, dict)] if isinstance(keys, list) else []
        if kid is None:
            named = [key for key in keys if key.get("use", "sig") == "sig"][:2]
            if len(named) == 1:
                return jwt.PyJWK(named[0], algorithm).key
            raise SignOnFailed("the ID token names no key of several")
        named = [key for key in keys if key.get("kid") == kid]
        if named:
            if named[0].get("alg", algorithm) != algorithm:
                raise SignOnFailed(f"key {kid!r} is not for {algorithm}")
            return jwt.PyJWK(named[0], algorithm).key
    raise SignOnFailed(f"the provider has no key {kid!r}")


def checked(token: str, kind: str = "ID token", required=("exp",)) -> dict:
    """The claims of a token the provider signed (an ID token, or a back-channel logout
    token): signed by one of its keys with an asymmetric algorithm it lists for ID tokens, for
    this client, from this issuer, current (within LEEWAY_S), with the claims `required`."""
    document = discovery()
    try:
        header = jwt.get_unverified_header(token)
        algorithm = header.get("alg")
        if algorithm not in algorithms(document):
            raise SignOnFailed(f"the {kind} is signed with {algorithm!r}")
        claims = jwt.decode(
            token,
            signing_key(document, header.get("kid"), algorithm),
            algorithms=[algorithm],
            audience=settings.MLSCHED_OIDC_CLIENT_ID,
            issuer=settings.MLSCHED_OIDC_ISSUER,
            leeway=LEEWAY_S,
            options={"require": ["iss", "aud", "iat", *required]},
        )
    except jwt.PyJWTError as error:
        raise SignOnFailed(f"the {kind}: {error}") from None
    if claims.get("azp", settings.MLSCHED_OIDC_CLIENT_ID) != settings.MLSCHED_OIDC_CLIENT_ID:
        raise SignOnFailed(f"the {kind} is for {claims['azp']!r}")
    if kind == "ID token" and not isinstance(claims.get("sub"), str):
        raise SignOnFailed("the ID token names no subject (sub)")
    return claims


def user_of(claims: dict) -> Verified:
    """Who the ID token's claims name, with their address and groups."""
    username = claims.get(settings.MLSCHED_OIDC_USERNAME_CLAIM)
    if not isinstance(username, str) or not is_username(username):
        raise SignOnFailed(
            f"the ID token's {settings.MLSCHED_OIDC_USERNAME_CLAIM} is no username: "
            f"{str(username)[:200]!r}",
            shown="Your account at the identity provider has no name this portal takes.",
        )
    email = claims.get("email") if claims.get("email_verified") is not False else None
    return Verified(username, email if isinstance(email, str) else None, groups_of(claims))


def groups_of(claims: dict) -> set[str]:
    """The groups the MLSCHED_OIDC_GROUPS_CLAIM claim lists: strings, or one with commas."""
    claim = settings.MLSCHED_OIDC_GROUPS_CLAIM
    written = claims.get(claim) if claim else None
    if isinstance(written, str):
        return set(group_names(written))
    if isinstance(written, list):
        return {group.strip() for group in written if isinstance(group, str) and group.strip()}
    return set()


class OidcBackend(ModelBackend):
    """The user a verified ID token names (`Verified`, from `callback` alone: a password login
    never reaches here); made at their first login where MLSCHED_AUTH_CREATES_USERS, their
    email address the provider's at each login. An account with a usable password is not
    logged in: a name at the provider does not take over a password account (a platform
    admin's); a platform admin makes accounts for sign-on without one (the admin's "Password-
    based authentication: disabled"), or removes the password of one moving to sign-on."""

    def authenticate(self, request, oidc_claims=None):
        if not isinstance(oidc_claims, Verified):
            return None
        users = auth.get_user_model()._default_manager
        name = {users.model.USERNAME_FIELD: oidc_claims.username}
        if settings.MLSCHED_AUTH_CREATES_USERS:
            user, created = users.get_or_create(**name)
        else:
            user, created = users.filter(**name).first(), False
            if user is None:
                log.warning("no account %r, and sign-on makes none", oidc_claims.username)
                return None
        if not created and user.has_usable_password():
            log.warning("%s's account logs in with a password: not taken over by sign-on", user)
            return None
        configured(user, created, oidc_claims.email, "the identity provider")
        if not self.user_can_authenticate(user):
            log.warning("%s's account is inactive: not logged in", user)
            return None
        return user


def end_session(request) -> str | None:
    """Where logging out sends the browser to end its session at the provider too: its
    end_session_endpoint, for a session it signed in (None: nowhere). The endpoint must be on
    the issuer's origin, the one the Content-Security-Policy lets a form's post go on to (as
    every provider has it)."""
    id_token = request.session.get(ID_TOKEN)
    if not id_token or request.session.get(auth.BACKEND_SESSION_KEY) != BACKEND:
        return None
    try:
        endpoint = discovery().get("end_session_endpoint")
    except SignOnFailed as failure:
        log.warning("the identity provider's session not ended: %s", failure.reason)
        return None
    if not isinstance(endpoint, str):
        return None
    if origin(endpoint) != origin(settings.MLSCHED_OIDC_ISSUER):
        log.warning("the identity provider's session not ended: %s is not on the issuer's "
                    "origin, where the portal's pages may send a form", endpoint)  # fmt: skip
        return None
    return with_query(
        endpoint,
        {
            "id_token_hint": id_token,
            "post_logout_redirect_uri": request.build_absolute_uri(
                resolve_url(settings.LOGIN_REDIRECT_URL)
            ),
            "client_id": settings.MLSCHED_OIDC_CLIENT_ID,
        },
    )


class Logout(LogoutView):
    """Django's, which for a session the provider signed in goes on to its end_session_endpoint
    (`end_session`)."""

    def post(self, request, *args, **kwargs):
        at_provider = end_session(request) if enabled() else None
        response = super().post(request, *args, **kwargs)
        return HttpResponseRedirect(at_provider) if at_provider else response
