"""`login` and `logout`: the command line signed in through the browser, as `gh auth login`
does (the server's quotas.cli_logins: OAuth 2.0's device authorization grant, RFC 8628), and
where the other commands find their token: MLSCHED_TOKEN, else the one `login` kept for
MLSCHED_URL in the credentials file.

The credentials file is `credentials.json` in $MLSCHED_CONFIG_DIR, else $XDG_CONFIG_HOME/mlsched,
else ~/.config/mlsched: `{"<server URL>": {"token", "username", "expires"}}`, a server each.
It is written readable by its owner alone (0600, in a folder made 0700) from its first byte."""

import argparse
import json
import os
import socket
import time
import webbrowser
from datetime import UTC, datetime
from pathlib import Path

from jobs.cli.client import Api, Unavailable, printable, refusal_said, show

CREDENTIALS = "credentials.json"
SLOW_DOWN_S = 5  # what each slow_down adds to the wait between polls (RFC 8628 section 3.5)
NAME_MAX = 100  # a token's name, as the server takes it
EXPIRED = "the code expired before it was confirmed: run `mlsched login` again"


def credentials_path() -> Path:
    """Where `login` keeps its tokens."""
    if folder := os.environ.get("MLSCHED_CONFIG_DIR"):
        return Path(folder) / CREDENTIALS
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "mlsched" / CREDENTIALS


def server(url: str) -> str:
    """A server's URL as the credentials file keys it: without a trailing slash."""
    return url.rstrip("/")


def token_like(token: str) -> bool:
    # Printable ASCII without spaces, as tokens are: any other character would come back in
    # an error message that quotes the Authorization header, the token with it.
    return token.isascii() and token.isprintable() and " " not in token


def kept() -> dict:
    """The credentials file's entries by server ({} without the file)."""
    path = credentials_path()
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise SystemExit(printable(f"cannot read {path}: {error}")) from None
    return entries if isinstance(entries, dict) else {}


def keep(entries: dict) -> None:
    """Write the credentials file whole: a file of its own made 0600, then moved in place."""
    path = credentials_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    written = path.with_name(f".{CREDENTIALS}.{os.getpid()}")
    written.unlink(missing_ok=True)
    descriptor = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.fchmod(descriptor, 0o600)  # whatever the umask
    with os.fdopen(descriptor, "w") as file:
        json.dump(entries, file, indent=2)
    os.replace(written, path)


def token_for(url: str) -> tuple[str, str]:
    """The token the commands call `url` with and where it came from (what an error names):
    MLSCHED_TOKEN's, else the one `login` kept for `url`; ("", "") for none."""
    if token := os.environ.get("MLSCHED_TOKEN", "").strip():
        return token, "MLSCHED_TOKEN"
    entry = kept().get(server(url))
    if isinstance(entry, dict) and isinstance(entry.get("token"), str) and entry["token"]:
        return entry["token"], f"the token `mlsched login` kept in {credentials_path()}"
    return "", ""


def token_name(text: str) -> str:
    """`login --name`: a token's name as the server takes one, 1 to NAME_MAX characters."""
    name = text.strip()
    if not name or len(name) > NAME_MAX:
        raise argparse.ArgumentTypeError(f"a name of 1 to {NAME_MAX} characters: {text[:120]!r}")
    return name


def login(url: str, args) -> None:
    """`login [--browser] [--name NAME]`: start a login, ask its user to approve it on the
    portal, poll until they have, and keep the token it gets for `url`, named as asked (by
    default "mlsched CLI on <host>", as the API tokens page lists it)."""
    api = Api(url, None)
    name = args.name or f"mlsched CLI on {socket.gethostname()}"[:NAME_MAX]
    started = api.call("POST", "cli-logins/", json={"name": name})
    page = started["verification_uri_complete"]
    show(f"Open {page} in your browser and confirm the code {started['user_code']}")
    if args.browser:
        webbrowser.open(page)
    granted = polled(api, started)
    if not (isinstance(granted.get("token"), str) and token_like(granted["token"])):
        raise SystemExit(f"{api.url} answered with no API token")
    entries = kept()
    entries[server(url)] = {key: granted.get(key) for key in ("token", "username", "expires")}
    keep(entries)
    show(f"Logged in to {server(url)} as {granted['username']}; the token {expiry(granted)}")


def polled(api: Api, started: dict) -> dict:
    """The server's answer once the login is approved; its refusal, an error the CLI exits
    with. Polls every `interval` seconds, longer by SLOW_DOWN_S at each slow_down."""
    interval, body = started["interval"], {"device_code": started["device_code"]}
    deadline = time.monotonic() + started["expires_in"]
    while time.monotonic() < deadline:
        time.sleep(interval)
        response = api.send("POST", "cli-logins/token/", json=body)
        if response.status_code == 200:
            return response.json()
        if response.status_code >= 500 or response.status_code == 429:
            continue  # a restart, a busy server: the login still waits
        error = refusal(response)
        if error == "slow_down":
            interval += SLOW_DOWN_S
        elif error == "access_denied":
            raise SystemExit("the login was denied in the browser")
        elif error == "expired_token":
            raise SystemExit(EXPIRED)
        elif error != "authorization_pending":
            raise SystemExit(printable(f"error {response.status_code}: {refusal_said(response)}"))
    raise SystemExit(EXPIRED)


def refusal(response) -> str:
    """The error code of a poll's 400 ("" for an answer without one)."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return ""
    return error if isinstance(error, str) else ""


def expiry(granted: dict) -> str:
    """When the token expires, as `login` says it."""
    try:
        expires = datetime.fromisoformat(granted.get("expires")).astimezone(UTC)
    except (TypeError, ValueError):
        return "never expires"
    return f"expires {expires:%Y-%m-%d %H:%M} UTC"


def logout(url: str, args) -> None:
    """`logout`: revoke the token `login` kept for `url` (`DELETE /api/v1/me/token/`) and
    forget it; forgotten even where the server cannot be told (it then says so)."""
    entries = kept()
    entry = entries.pop(server(url), None)
    if entry is None:
        show(f"Not logged in to {server(url)}: nothing to forget")
        return
    token, status = entry.get("token") if isinstance(entry, dict) else None, None
    if isinstance(token, str) and token_like(token):
        try:
            api = Api(url, token, source=str(credentials_path()))
            status = api.send("DELETE", "me/token/").status_code
        except Unavailable:
            pass
    keep(entries)
    if status in (204, 401):  # revoked now, or already expired or revoked
        show(f"Logged out of {server(url)}: its token is revoked")
    else:
        show(
            f"Logged out of {server(url)}: its token is forgotten here, but the server could not "
            f"revoke it ({status or 'no answer'}); revoke it on {server(url)}/tokens/"
        )
