"""Single sign-on through an authenticating proxy in front of the web app (oauth2-proxy, an
ingress controller's external auth, Pomerium): where MLSCHED_AUTH_USER_HEADER names the header
such a proxy sets to the user it signed in (`X-Auth-Request-User`, `X-Forwarded-User`), a
request carrying it is that user's. The portal logs them in (a session, which the API's
session authentication and the live pages' websockets read as after a password login); an
account is made at a user's first visit unless MLSCHED_AUTH_CREATES_USERS is off (then a
platform admin makes it first), with no team: a platform admin or a team's admin adds them
to teams, as any user. MLSCHED_AUTH_EMAIL_HEADER, where set, names the header giving their
email address, which their account takes at each login. MLSCHED_AUTH_GROUPS_HEADER, where
set, names the header of their groups (oauth2-proxy's X-Auth-Request-Groups, with commas): a
team whose `owner_groups`, `member_groups` or `viewer_groups` (a platform admin's) lists one of
them has them as an owner, a member or a viewer, made at login, changed or removed as their
groups change; a membership given by hand is the admins' and stays. A user in one of
MLSCHED_AUTH_ADMIN_GROUPS is a platform admin while they are (`sign_on.admin_by`), and one in
one of MLSCHED_AUTH_TENANT_ADMIN_GROUPS a tenant admin (`sign_on.tenant_admin_by`).

A session the proxy's header logged in ends once a request comes without it, or with another
user's name (the proxy signed them out, or another user in). A password login (a platform
admin's, without the proxy) is left alone while no header comes. A name Django would not take
for a username, or an account that is inactive, is not logged in.

Only the proxy may set the header: the web app must be reached through it alone, or
MLSCHED_AUTH_PROXY_FROM names the networks the proxy's requests come from, and the header from
any other peer is ignored. API tokens are unaffected."""

import ipaddress
import logging
from functools import cache

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.backends import RemoteUserBackend

from mlsched_site import errors
from quotas.models import group_names
from quotas.sign_on import configured, groups_pushed, is_username, join_groups

log = logging.getLogger(__name__)

BACKEND = "quotas.proxy_auth.ProxyBackend"
GROUPS_SEEN = "mlsched-sign-on-groups"  # the session's key: the groups header it last followed


def meta_key(header: str) -> str:
    """Where a header named as HTTP writes it (`X-Auth-Request-User`) is in request.META."""
    return "HTTP_" + header.upper().replace("-", "_")


@cache
def networks(written: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(part.strip()) for part in written.split(",") if part.strip())


def from_proxy(request) -> bool:
    """Whether the request's peer may be the proxy: any, unless MLSCHED_AUTH_PROXY_FROM
    names the networks it is in."""
    trusted = networks(settings.MLSCHED_AUTH_PROXY_FROM)
    if not trusted:
        return True
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(peer in network for network in trusted)


def header(request, setting: str) -> str | None:
    """The value of the header a setting names, from the proxy (None: none, or not from it)."""
    name = getattr(settings, setting)
    if not name or not from_proxy(request):
        return None
    value = request.META.get(meta_key(name))
    return value.strip() if value is not None else None


def signed_in_by_proxy(get_response):
    """Middleware, after the authentication middleware: the request's user as the proxy names
    them (see the module)."""

    def middleware(request):
        if settings.MLSCHED_AUTH_USER_HEADER:
            try:
                sign_in(request)
            except errors.UNAVAILABLE as lost:
                return errors.unavailable(request, lost)
        return get_response(request)

    return middleware


def sign_in(request) -> None:
    name = header(request, "MLSCHED_AUTH_USER_HEADER")
    by_proxy = request.session.get(auth.BACKEND_SESSION_KEY) == BACKEND
    user = request.user
    if name is None:
        if user.is_authenticated and by_proxy:
            auth.logout(request)
        return
    if user.is_authenticated and user.get_username() != name:
        auth.logout(request)  # the proxy signed another user in
    elif user.is_authenticated:
        follow_groups(request, user)
        return
    signed = auth.authenticate(request, remote_user=name)
    if signed is not None:
        request.user = signed
        auth.login(request, signed, backend=BACKEND)
        follow_groups(request, signed)


def follow_groups(request, user) -> None:
    """Where MLSCHED_AUTH_GROUPS_HEADER names the header of the user's groups, their
    memberships from groups as those groups give them (`join_groups`), at login and whenever
    the header says other groups than the session last saw."""
    if not settings.MLSCHED_AUTH_GROUPS_HEADER or groups_pushed():
        return
    written = header(request, "MLSCHED_AUTH_GROUPS_HEADER") or ""
    if request.session.get(GROUPS_SEEN) == written:
        return
    join_groups(user, set(group_names(written)))
    request.session[GROUPS_SEEN] = written


class ProxyBackend(RemoteUserBackend):
    """The user the proxy names; made at their first visit where MLSCHED_AUTH_CREATES_USERS,
    their email address the proxy's at each login."""

    def authenticate(self, request, remote_user):
        if not settings.MLSCHED_AUTH_USER_HEADER or request is None:
            return None  # nothing but the middleware logs in by a name alone
        if not is_username(remote_user):
            log.warning("the proxy's user %r is no username: not logged in", remote_user[:200])
            return None
        return super().authenticate(request, remote_user)

    @property
    def create_unknown_user(self) -> bool:  # type: ignore[override]
        return settings.MLSCHED_AUTH_CREATES_USERS

    def configure_user(self, request, user, created=True):
        """An account made has no password: its user signs in through the proxy (a password
        reset, which skips such accounts, cannot give it one)."""
        email = header(request, "MLSCHED_AUTH_EMAIL_HEADER") if request is not None else None
        return configured(user, created, email, "the proxy")
