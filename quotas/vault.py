"""Tenants' secrets sealed at rest (``TenantSecret.sealed``): Fernet (AES-128-CBC with an
HMAC-SHA256) under the platform's keys.

``MLSCHED_SECRETS_KEYS`` lists them, comma-separated, each any string (its SHA-256 is the
Fernet key): the first seals, every one opens, so keys rotate by putting a new one first and
sealing the secrets anew (``manage.py reseal_secrets``) before the old one is dropped. Without
it, one key is derived from ``SECRET_KEY``, and a changed ``SECRET_KEY`` leaves the secrets
unreadable (their jobs then fail to start, saying so, until the secrets are set again).
"""

from __future__ import annotations

import base64
import functools
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class Unreadable(Exception):
    """A sealed secret that none of the keys opens."""


def seal(value: str) -> str:
    return _fernet(_keys()).encrypt(value.encode()).decode()


def unseal(sealed: str) -> str:
    try:
        return _fernet(_keys()).decrypt(sealed.encode()).decode()
    except InvalidToken as error:
        raise Unreadable("no key of MLSCHED_SECRETS_KEYS opens it") from error


def reseal(sealed: str) -> str:
    """The secret sealed under the first key (Fernet's rotate)."""
    try:
        return _fernet(_keys()).rotate(sealed.encode()).decode()
    except InvalidToken as error:
        raise Unreadable("no key of MLSCHED_SECRETS_KEYS opens it") from error


def _keys() -> tuple[str, ...]:
    keys = tuple(settings.MLSCHED_SECRETS_KEYS)
    return keys or ("mlsched tenant secrets " + settings.SECRET_KEY,)


@functools.lru_cache(maxsize=8)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet(
        [Fernet(base64.urlsafe_b64encode(hashlib.sha256(k.encode()).digest())) for k in keys]
    )
