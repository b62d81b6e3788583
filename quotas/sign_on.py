"""What the two single sign-ons share, the authenticating proxy's (quotas/proxy_auth.py) and
OpenID Connect's (quotas/oidc.py): the names they take for usernames, and the account a login
leaves (made without a usable password, its email address the sign-on's)."""

import logging

from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

log = logging.getLogger(__name__)

NAME_LENGTH = 150  # Django's username's


def is_username(name: str) -> bool:
    """Whether Django takes `name` for a username: its validator's characters, at most
    NAME_LENGTH of them."""
    if len(name) > NAME_LENGTH:
        return False
    try:
        UnicodeUsernameValidator()(name)
    except ValidationError:
        return False
    return True


def configured(user, created: bool, email: str | None, source: str):
    """The account as a sign-on through `source` leaves it: made without a usable password
    (its user signs in there, and a password reset, which skips such accounts, cannot give it
    one), its email address `source`'s where that is one."""
    changed = []
    if created:
        user.set_unusable_password()
        changed.append("password")
    if email and email != user.email:
        try:
            validate_email(email)
        except ValidationError:
            log.warning("%s's email address for %s is no address: kept", source, user)
        else:
            user.email = email
            changed.append("email")
    if changed:
        user.save(update_fields=changed)
    return user
