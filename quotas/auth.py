"""The users' API authentication: `Authorization: Token <key>` with a personal API token."""

from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import SAFE_METHODS, BasePermission

from quotas import tokens
from quotas.models import ApiToken


class ApiTokenAuthentication(TokenAuthentication):
    """DRF's header parsing (and its answers to a malformed header), with the key checked
    against the stored hashes of quotas.ApiToken instead of plain-text keys.

    It comes first in DEFAULT_AUTHENTICATION_CLASSES: DRF takes the first class's scheme for
    WWW-Authenticate, and without one it answers a refused token with 403 instead of 401."""

    def authenticate_credentials(self, key):
        token = tokens.token_for_key(key)
        if token is None:
            raise AuthenticationFailed("Invalid, revoked or expired token.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        return token.user, token


class TokenScope(BasePermission):
    """A read-only API token reads (GET, HEAD, OPTIONS, and a view that `writes_nothing`,
    a test-only submission) and changes nothing: every other call made with it is refused,
    403, whatever its user may do."""

    message = (
        "This API token only reads: it may not change anything. Create one that is not "
        "read-only on the portal's API tokens page."
    )

    def has_permission(self, request, view) -> bool:
        token = request.auth
        read_only = isinstance(token, ApiToken) and token.read_only
        reads = request.method in SAFE_METHODS or getattr(view, "writes_nothing", False)
        return not read_only or reads
