"""Portal sessions OpenID Connect signed in, kept in step with the provider's (quotas/oidc.py
signs them in and keeps each as an `OidcSession`).

Every MLSCHED_OIDC_RECHECK_S a session is checked again with the provider by its refresh
token (`kept_in_step`, middleware): a refusal (the provider ended its session: the user
signed out there, was disabled or deleted) logs the session out at once; a new ID token
brings the user's address and groups (teams and platform admins follow them, as at a login);
a provider that does not answer leaves the session as it is and is asked again RETRY_S later
(an outage there does not sign everyone out). One request of the session checks, the others
go on meanwhile. A provider that gives no refresh token leaves its sessions unchecked: they
last as Django's do, unless its back-channel logout ends them.

The provider's back-channel logout (OpenID Connect Back-Channel Logout 1.0; Keycloak, Okta,
Entra ID, Authentik call it when a user signs out, or an admin ends their sessions, there)
POSTs a logout token to `backchannel_logout`: signed as its ID tokens are, for this client,
from this issuer, recent, with the logout event and naming the provider's session (`sid`) or
the user there (`sub`), never a nonce, and seen once; the portal's sessions it names end."""

import hashlib
import logging
import time
from datetime import timedelta
from importlib import import_module

from django.conf import settings
from django.contrib import auth
from django.core.cache import caches
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from jobs.events import best_effort
from mlsched_site import errors
from quotas import oidc, vault
from quotas.models import OidcSession
from quotas.sign_on import configured, groups_pushed, join_groups

log = logging.getLogger(__name__)

RETRY_S = 60  # a provider that did not answer is asked again after this
EVENT = "http://schemas.openid.net/event/backchannel-logout"
LOGOUT_TOKEN_S = 600  # a logout token issued longer ago is refused; its jti is kept this long
NO_STORE = {"Cache-Control": "no-store"}


def kept_in_step(get_response):
    """Middleware, after the authentication middleware: a session OpenID Connect signed in is
    checked again with the provider once due (`recheck`)."""

    def middleware(request):
        try:
            if oidc.enabled() and settings.MLSCHED_OIDC_RECHECK_S and due(request.session):
                recheck(request)
        except errors.UNAVAILABLE as lost:
            return errors.unavailable(request, lost)
        return get_response(request)

    return middleware


def due(session) -> bool:
    """Whether the session is one OpenID Connect signed in whose check is due, by what the
    session says (its row decides: another request may have checked it since)."""
    if session.get(auth.BACKEND_SESSION_KEY) != oidc.BACKEND:
        return False
    at = session.get(oidc.RECHECK_AT, 0)
    return at is not None and at <= time.time()


def noted(session, at) -> None:
    session[oidc.RECHECK_AT] = at.timestamp() if at is not None else None


def recheck(request) -> None:
    """Check the session with the provider, once its row is due and this request claims it
    (the claim puts its next check RETRY_S ahead, so the other requests of the session go on):
    its refresh token refused, or an ID token that does not hold or names someone else, logs
    it out; otherwise its next check is MLSCHED_OIDC_RECHECK_S ahead, with the refresh token
    the provider gave, and a new ID token's address and groups followed."""
    key, now = request.session.session_key, timezone.now()
    rows = OidcSession.objects.filter(session_key=key)
    if not rows.filter(recheck_at__lte=now).update(recheck_at=now + timedelta(seconds=RETRY_S)):
        kept = rows.values_list("recheck_at", flat=True)
        if not kept:
            return signed_out(request, "the session is no longer known as the provider's")
        return noted(request.session, kept[0])
    row = rows.get()
    try:
        refresh_token = vault.unseal(row.refresh_token)
    except vault.Unreadable:
        return signed_out(request, "its refresh token is sealed under a key no longer set")
    grant = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    try:
        tokens = oidc.tokens_for(grant, id_token_needed=False)
        signed = who(tokens.get("id_token"), row, request.user)
    except oidc.TokenRefused as refusal:
        return signed_out(request, f"the provider refused its refresh token: {refusal.reason}")
    except oidc.SignOnFailed as failure:
        if failure.status == 502:
            log.warning("%s's session not checked with the provider, asked again in %s s: %s",
                        request.user, RETRY_S, failure.reason)  # fmt: skip
            return noted(request.session, now + timedelta(seconds=RETRY_S))
        return signed_out(request, f"its new ID token does not hold: {failure.reason}")
    row.recheck_at = now + timedelta(seconds=settings.MLSCHED_OIDC_RECHECK_S)
    row.refresh_token = vault.seal(tokens.get("refresh_token") or refresh_token)
    row.save(update_fields=["recheck_at", "refresh_token"])
    noted(request.session, row.recheck_at)
    if signed is not None:
        configured(request.user, False, signed.email, "the identity provider")
        if settings.MLSCHED_OIDC_GROUPS_CLAIM and not groups_pushed():
            join_groups(request.user, signed.groups)


def who(id_token: str | None, row: OidcSession, user) -> oidc.Verified | None:
    """Whom a refreshed ID token names (None: the answer had none), which must be the
    session's subject and user."""
    if id_token is None:
        return None
    claims = oidc.checked(id_token)
    if claims["sub"] != row.subject:
        raise oidc.SignOnFailed(f"it is {claims['sub']!r}'s, not {row.subject!r}'s")
    signed = oidc.user_of(claims)
    if signed.username != user.get_username():
        raise oidc.SignOnFailed(f"it names {signed.username!r}, not {user.get_username()!r}")
    return signed


def signed_out(request, why: str) -> None:
    log.info("%s's session logged out: %s", request.user, why)
    auth.logout(request)


def forget(sender, request, user, **kwargs) -> None:
    """Django's `user_logged_out`: the session's row goes with it."""
    if request is not None and request.session.session_key:
        OidcSession.objects.filter(session_key=request.session.session_key).delete()


def ended(rows) -> int:
    """End the sessions of `rows` (whatever the session engine) and delete the rows: how many."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    keys = list(rows.values_list("session_key", flat=True))
    for key in keys:
        store(session_key=key).delete()
    OidcSession.objects.filter(session_key__in=keys).delete()
    return len(keys)


def logout_claims(logout_token: str) -> dict:
    """The claims of a logout token that holds (see the module's docstring)."""
    if not logout_token:
        raise oidc.SignOnFailed("no logout_token", status=400)
    claims = oidc.checked(logout_token, "logout token", required=())
    events = claims.get("events")
    if not isinstance(events, dict) or not isinstance(events.get(EVENT), dict):
        raise oidc.SignOnFailed("the logout token has no back-channel logout event")
    if "nonce" in claims:
        raise oidc.SignOnFailed("the logout token has a nonce: an ID token is none")
    if not any(isinstance(claims.get(name), str) and claims[name] for name in ("sub", "sid")):
        raise oidc.SignOnFailed("the logout token names neither a sub nor a sid")
    if not isinstance(claims["iat"], int | float) or claims["iat"] < time.time() - LOGOUT_TOKEN_S:
        raise oidc.SignOnFailed(f"the logout token was issued over {LOGOUT_TOKEN_S} s ago")
    if jti := claims.get("jti"):
        first = True
        with best_effort("the logout tokens seen"):
            seen = "oidc-logout-jti:" + hashlib.sha256(str(jti).encode()).hexdigest()
            first = caches["throttle"].add(seen, 1, LOGOUT_TOKEN_S + oidc.LEEWAY_S)
        if not first:
            raise oidc.SignOnFailed("the logout token was used already")
    return claims


@csrf_exempt
@require_POST
def backchannel_logout(request):
    """The provider's back-channel logout: the sessions its logout token names end (its `sid`,
    of its `sub` where it names both; every session of its `sub` where it names no sid)."""
    oidc.on_or_404()
    try:
        claims = logout_claims(request.POST.get("logout_token", ""))
    except oidc.SignOnFailed as failure:
        log.warning("back-channel logout refused: %s", failure.reason)
        status = failure.status if failure.status == 502 else 400
        refusal = {"error": "invalid_request", "error_description": failure.reason[:300]}
        return JsonResponse(refusal, status=status, headers=NO_STORE)
    rows = OidcSession.objects.all()
    if claims.get("sid"):
        rows = rows.filter(sid=claims["sid"])
    if claims.get("sub"):
        rows = rows.filter(subject=claims["sub"])
    count = ended(rows)
    log.info("back-channel logout of sub %r sid %r: %d sessions ended",
             claims.get("sub"), claims.get("sid"), count)  # fmt: skip
    return HttpResponse(status=200, headers=NO_STORE)
