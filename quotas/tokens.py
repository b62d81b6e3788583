"""Users' personal API tokens: created (the key shown once), used, revoked.

A key is ``mls_`` and 43 random URL-safe characters (256 bits). Only its SHA-256 is stored, so
the database, its backups and the admin hold nothing a caller could present. A key is found by
looking its hash up, which compares in constant time by construction: nothing about how much
of a guess was right shows in the answer's timing.
"""

import hashlib
import logging
import secrets
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from quotas import history
from quotas.models import ApiToken

log = logging.getLogger(__name__)

KEY_PREFIX = "mls_"
SHOWN_CHARS = 12  # kept as the token's prefix: "mls_" and 8 of the random characters
MAX_TOKENS_PER_USER = 50
NAME_MAX = ApiToken._meta.get_field("name").max_length
EXPIRY_DAYS = (30, 90, 365)  # the portal's choices besides "never"
# Authentication records a use at most this often per token, so an API call is not a write.
LAST_USED_EVERY = timedelta(minutes=1)


class TokenError(ValueError):
    """A request the token verbs refuse: ``field`` names the input at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def hash_key(key: str) -> str:
    # surrogatepass: a header may carry anything; it must hash (and match nothing), not fail.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def parse_expiry(text: str) -> int | None:
    """The portal's expiry choice: days, or None for a token that does not expire."""
    if text in ("", "never"):
        return None
    if text not in {str(days) for days in EXPIRY_DAYS}:
        raise TokenError("expires", "Choose when the token expires from the list.")
    return int(text)


def create_token(
    user,
    name: str,
    expires_in_days: int | None = None,
    *,
    now: datetime | None = None,
    read_only: bool = False,
) -> tuple[ApiToken, str]:
    """Issue ``user`` a new token named ``name`` (``read_only``: it only reads): the stored
    row, and the key, which is never stored and cannot be shown again. Raises TokenError for
    a bad name or expiry, or when the user already holds MAX_TOKENS_PER_USER tokens."""
    name = check_name(name)
    if expires_in_days is not None and expires_in_days not in EXPIRY_DAYS:
        raise TokenError("expires", "Choose when the token expires from the list.")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    now = now or timezone.now()
    expires = now + timedelta(days=expires_in_days) if expires_in_days else None
    with transaction.atomic():
        # The user's row lock makes two concurrent creates count one after the other.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        if ApiToken.objects.filter(user=user).count() >= MAX_TOKENS_PER_USER:
            raise TokenError(
                "tokens", f"You hold {MAX_TOKENS_PER_USER} tokens, the most allowed: revoke one."
            )
        token = ApiToken.objects.create(
            user=user, name=name, prefix=key[:SHOWN_CHARS], key_hash=hash_key(key),
            created=now, expires=expires, read_only=read_only,
        )  # fmt: skip
        scope = "read-only" if read_only else "read and write"
        until = f"expires {expires:%Y-%m-%d %H:%M} UTC" if expires else "never expires"
        history.record(user, [token], f"Issued ({scope}, {until})", history.ADDITION)
    log.info("API token %s (%s...) issued to %s", token.pk, token.prefix, user)
    return token, key


def check_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise TokenError("name", "Give the token a name, e.g. the machine it is for.")
    if len(name) > NAME_MAX:
        raise TokenError("name", f"A token's name has at most {NAME_MAX} characters.")
    if not name.isprintable():  # NUL, which PostgreSQL cannot store, and other controls
        raise TokenError("name", "A token's name cannot hold control characters.")
    return name


def revoke_token(token: ApiToken, by, why: str = "") -> bool:
    """Revoke ``token`` for good: its key authenticates nobody from now on; in the platform's
    history as ``by``'s, with ``why`` where it is said. False, and nothing written, if it was
    revoked already (by a call at the same time)."""
    pk = token.pk
    with transaction.atomic():
        if not ApiToken.objects.select_for_update().filter(pk=pk).exists():
            return False
        said = f"Revoked (of {token.user})" + (f": {why}" if why else "")
        history.record(by, [token], said, history.DELETION)
        token.delete()
    log.info("API token %s (%s...) of %s revoked by %s", pk, token.prefix, token.user, by)
    return True


def token_for_key(key: str, now: datetime | None = None) -> ApiToken | None:
    """The live token whose key is ``key``, with its user; None for an unknown, revoked or
    expired key. Records the use, at most once every LAST_USED_EVERY."""
    now = now or timezone.now()
    token = ApiToken.objects.select_related("user").filter(key_hash=hash_key(key)).first()
    if token is None or token.has_expired(now):
        return None
    if token.last_used is None or now - token.last_used >= LAST_USED_EVERY:
        # Conditional: of concurrent requests after a quiet minute, one writes.
        stale = Q(last_used__isnull=True) | Q(last_used__lt=now - LAST_USED_EVERY)
        ApiToken.objects.filter(stale, pk=token.pk).update(last_used=now)
    return token
