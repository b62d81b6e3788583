"""The command line signed in through the browser (`mlsched login`): OAuth 2.0's device
authorization grant (RFC 8628), as `gh auth login` and `az login --use-device-code` do it.

1. The CLI starts a login (`start`) and gets two codes: a device code, the secret it polls
   with (kept here only as its SHA-256, as API tokens' keys are), and a user code, eight
   letters its user types on the portal (BCDF-GHJK).
2. Its user, signed in on the portal's /cli-login/ page, finds the login by the user code
   (`waiting`) and approves it, choosing whether its token only reads (`approve`), or denies
   it (`deny`).
3. The CLI polls (`poll`) no faster than the login's interval, told to wait meanwhile (and to
   slow down, its interval longer by SLOW_DOWN, when it polls sooner). Its first poll after
   the approval makes the user an API token (quotas.tokens.create_token, which records it in
   the history) and is the only answer that ever holds its key: no key is stored. The login
   is then spent; a poll after that, or after LIFE, finds it expired.

Rows older than KEPT are deleted as a new login starts. Wrong user codes typed on the page
count per user in the throttle cache: past WRONG_CODES within WRONG_CODES_WINDOW the page takes
none until the window ends (and with the cache out of reach, counts nothing, as
quotas.logins does)."""

import contextlib
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.events import best_effort
from quotas import history, tokens
from quotas.models import ApiToken, CliLogin

log = logging.getLogger(__name__)

ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # RFC 8628's base-20: no vowels, nothing read as another
CODE_LETTERS = 8  # 20^8, some 34 bits, against at most WRONG_CODES guesses a window
LIFE = timedelta(minutes=10)  # from its start to its approval and the CLI's poll
INTERVAL_S = 5  # the CLI's shortest wait between polls, at first
SLOW_DOWN = 5  # seconds each poll that came too soon adds to it (RFC 8628 section 3.5)
KEPT = timedelta(days=1)
DEFAULT_NAME = "mlsched CLI"
WRONG_CODES = 10
WRONG_CODES_WINDOW = timedelta(minutes=15)

# The poll's answers besides the token, as RFC 8628 section 3.5 names them.
PENDING = "authorization_pending"
SLOW = "slow_down"
DENIED = "access_denied"
EXPIRED = "expired_token"


class Refused(Exception):
    """A poll answered with no token: `error`, one of the codes above, and why, for people."""

    def __init__(self, error: str, description: str = ""):
        super().__init__(error)
        self.error, self.description = error, description


@dataclass(frozen=True)
class Started:
    """A login just started: its codes, the device code's only copy among them."""

    login: CliLogin
    device_code: str

    @property
    def user_code(self) -> str:
        return shown(self.login.user_code)


def check_token_days() -> None:
    """The server does not start with a token life the portal does not offer."""
    days = settings.MLSCHED_CLI_LOGIN_TOKEN_DAYS
    if days not in tokens.EXPIRY_DAYS:
        choices = ", ".join(str(choice) for choice in tokens.EXPIRY_DAYS)
        raise ImproperlyConfigured(f"MLSCHED_CLI_LOGIN_TOKEN_DAYS: {days} is not one of {choices}")


def shown(letters: str) -> str:
    """A user code as people read it: BCDF-GHJK."""
    return f"{letters[:4]}-{letters[4:]}"


def typed(text: str) -> str:
    """A user code as typed: its letters in upper case, dashes and spaces left out."""
    return "".join(char for char in text[:40].upper() if char not in "- ")


def start(name: str, address: str, now: datetime | None = None) -> Started:
    """Start a login of the CLI named `name` (the token's name; a TokenError naming `name`
    for one create_token refuses) from the client `address`. Rows older than KEPT go."""
    name = tokens.check_name(name)
    now = now or timezone.now()
    CliLogin.objects.filter(created__lt=now - KEPT).delete()
    device_code = secrets.token_urlsafe(32)

    def made() -> CliLogin:
        user_code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LETTERS))
        return CliLogin.objects.create(
            device_code_hash=tokens.hash_key(device_code), user_code=user_code, name=name,
            requested_from=address[:45], created=now, expires=now + LIFE, interval_s=INTERVAL_S,
        )  # fmt: skip

    # A user code a waiting login holds already is drawn again, once: a second clash (one
    # chance in billions squared) is the IntegrityError it raises.
    with contextlib.suppress(IntegrityError), transaction.atomic():
        return Started(made(), device_code)
    return Started(made(), device_code)


def waiting(code: str, now: datetime | None = None) -> CliLogin | None:
    """The login waiting for its user under user code `code` (any case, with or without its
    dash); None for a wrong code, an expired one, or one already decided."""
    letters = typed(code)
    if len(letters) != CODE_LETTERS:
        return None
    live = CliLogin.objects.filter(expires__gt=now or timezone.now())
    return live.filter(user_code=letters, state=CliLogin.State.PENDING).first()


def approve(login: CliLogin, user, *, read_only: bool = False, now=None) -> bool:
    """`user` approves `login`: the CLI's next poll gets a token of theirs (`read_only`: it
    only reads). False if it no longer waits (expired, or decided meanwhile); a TokenError
    when the user holds as many tokens as they may."""
    if ApiToken.objects.filter(user=user).count() >= tokens.MAX_TOKENS_PER_USER:
        raise tokens.TokenError(
            "tokens", f"You hold {tokens.MAX_TOKENS_PER_USER} tokens, the most allowed: revoke one."
        )
    if not decided(login, user, CliLogin.State.APPROVED, read_only, now):
        return False
    scope = "a read-only token" if read_only else "a read and write token"
    history.record(user, [login], f"Approved, for {scope}", history.CHANGE)
    log.info("CLI login %s from %s approved by %s", login.pk, login.requested_from, user)
    return True


def deny(login: CliLogin, user, now=None) -> bool:
    """`user` denies `login`: the CLI's next poll is told so. False if it no longer waits."""
    if not decided(login, user, CliLogin.State.DENIED, False, now):
        return False
    history.record(user, [login], "Denied", history.CHANGE)
    return True


def decided(login: CliLogin, user, state: str, read_only: bool, now) -> bool:
    # Conditional: of two decisions (two tabs, two users typing the code), one wins.
    live = CliLogin.objects.filter(
        pk=login.pk, state=CliLogin.State.PENDING, expires__gt=now or timezone.now()
    )
    if not live.update(state=state, user=user, read_only=read_only):
        return False
    login.state, login.user, login.read_only = state, user, read_only
    return True


def poll(device_code: str, now: datetime | None = None) -> tuple[ApiToken, str]:
    """The CLI's poll with its device code: once its login is approved, the new token and its
    key (the only time the key exists); a Refused saying why not otherwise."""
    now = now or timezone.now()
    with transaction.atomic():
        login = (
            CliLogin.objects.select_for_update(of=("self",))
            .select_related("user")
            .filter(device_code_hash=tokens.hash_key(device_code))
            .first()
        )
        answer = refusal(login, now) or handed_out(login, now)
    if isinstance(answer, Refused):
        raise answer
    return answer


def refusal(login: CliLogin | None, now: datetime) -> Refused | None:
    """Why this poll gets no token (None: its login is approved), the poll recorded."""
    if login is None or login.state == CliLogin.State.SPENT or login.expires <= now:
        return Refused(EXPIRED, "The login expired, or was used: start another one.")
    early = login.last_polled is not None and (
        now - login.last_polled < timedelta(seconds=login.interval_s)
    )
    login.last_polled = now
    if early:
        login.interval_s += SLOW_DOWN
    login.save(update_fields=["last_polled", "interval_s"])
    if early:
        return Refused(SLOW, f"Poll at most every {login.interval_s} seconds.")
    if login.state == CliLogin.State.DENIED:
        return Refused(DENIED, "The login was denied on the portal.")
    if login.state == CliLogin.State.PENDING:
        return Refused(PENDING, "The login waits for its user on the portal.")
    return None


def handed_out(login: CliLogin, now: datetime) -> tuple[ApiToken, str] | Refused:
    """The approved login's token, made for its user now; the login spent."""
    try:
        if not login.user.is_active:
            raise tokens.TokenError("user", "The account that approved the login is disabled.")
        token, key = tokens.create_token(
            login.user, login.name, settings.MLSCHED_CLI_LOGIN_TOKEN_DAYS, now=now,
            read_only=login.read_only,
        )  # fmt: skip
    except tokens.TokenError as error:
        login.state = CliLogin.State.DENIED
        login.save(update_fields=["state"])
        return Refused(DENIED, error.message)
    login.state, login.token = CliLogin.State.SPENT, token
    login.save(update_fields=["state", "token"])
    return token, key


def _wrong_codes_key(user) -> str:
    return f"cli-login-wrong-codes:{user.pk}"


def too_many_wrong_codes(user) -> bool:
    """Whether `user` typed WRONG_CODES wrong codes within the window: the page takes none."""
    with best_effort("the wrong CLI login codes' count"):
        return caches["throttle"].get(_wrong_codes_key(user), 0) >= WRONG_CODES
    return False


def wrong_code(user) -> None:
    """Count a wrong code `user` typed; the first of a window starts it."""
    cache, key = caches["throttle"], _wrong_codes_key(user)
    with best_effort("the wrong CLI login codes' count"):
        cache.add(key, 0, int(WRONG_CODES_WINDOW.total_seconds()))
        cache.incr(key)
