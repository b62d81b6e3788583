"""The users' API authentication: `Authorization: Token <key>` with a personal API token."""

from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from quotas import tokens


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
