"""The CLI's side of HTTP: the API client (its token, its retries after a 429, its notice of
another release on the server), and what it prints of what the server sends, made safe for a
terminal."""

import functools
import os
import re
import shlex
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from email.utils import parsedate_to_datetime
from importlib import resources
from urllib.parse import quote

import requests

from jobs.efficiency import span

TERMINAL = {"succeeded", "failed", "canceled"}

LOCAL = "http://127.0.0.1:8000"
# The file naming the server a CLI downloaded from it talks to (jobs/cli_archive.py adds it).
SERVER_FILE = "server.txt"
# The file naming a downloaded CLI's release (jobs/cli_archive.py adds it too), and the header
# the API's answers name the release the server gives in.
RELEASE_FILE = "release.txt"
RELEASE_HEADER = "Mlsched-Cli-Release"


def server_url() -> str:
    """Where the API is: MLSCHED_URL; else the server the CLI was downloaded from, where it
    was; else this host's development server."""
    if url := os.environ.get("MLSCHED_URL"):
        return url
    try:
        named = resources.files("jobs.cli").joinpath(SERVER_FILE).read_text().strip()
    except OSError:  # not a downloaded CLI
        return LOCAL
    return named or LOCAL


@functools.cache
def release() -> str | None:
    """This CLI's release, as the archive it was downloaded in names it; None run from a
    checkout, which is no release."""
    try:
        return resources.files("jobs.cli").joinpath(RELEASE_FILE).read_text().strip() or None
    except (OSError, ValueError):
        return None


told_of_release = False  # the notice is given once a run, however many requests it makes


def tell_of_release(server: str, response: requests.Response) -> None:
    """On stderr, once a run: the server gives another release of the CLI than this copy, and
    the command that replaces this copy with it (as gh says a new release is available). Said
    by a downloaded CLI alone, unless MLSCHED_NO_UPDATE_NOTIFIER is set; never an error. A
    release is a digest, not a version number: "another", not "newer" (a server rolled back
    gives an older one)."""
    global told_of_release
    theirs, ours = response.headers.get(RELEASE_HEADER), release()
    if told_of_release or not theirs or not ours or theirs == ours:
        return
    told_of_release = True
    if os.environ.get("MLSCHED_NO_UPDATE_NOTIFIER"):
        return
    # The copy run is the one replaced: `./mlsched`, `mlsched.pyz`, `~/bin/mlsched` on the PATH.
    fetch = f"curl -fo {shlex.quote(sys.argv[0] or 'mlsched')} {server}/cli/mlsched.pyz"
    line = f"{server} gives another release of mlsched than this one; to update it: {fetch}"
    print(printable(line), file=sys.stderr, flush=True)


STATES = ["queued", "scheduled", "running", *sorted(TERMINAL)]


# The field each state's time is counted from (the API's names, the Job model's too): the
# CLI's TIME column and the portal's "running for 3 h" (jobs.views.time_in_state). An ended
# job's is its run, from its start to its end.
COUNTED_FROM = {"queued": "created", "scheduled": "scheduled_at", "running": "started_at"}


MAX_RETRY_AFTER_S = 60  # a 429 or 503 asking for a longer wait is reported, not waited out
# A 503 with Retry-After (the server lost its database partway: a restart, a failover) is asked
# again at most this many times in a row; then it is an error.
MAX_UNAVAILABLE_RETRIES = 6


# C0 and C1 control characters and DEL, but tab, newline and carriage return (a progress bar
# redraws its line with it): in a job's output or name they would reach the reader's terminal
# as commands (move the cursor, clear the screen, set the window title, write to the
# clipboard). 0x9b alone starts a sequence on some terminals.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st... (a place in line, as the job page, the
    portal's lists and the CLI say it)."""
    last = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{last}"


# What a job may ask its team's webhook to be told of beyond its end (its notify fields), as
# the job page, `status` and its events say each.
NOTICES = {
    "notify_start": "its start",
    "notify_requeue": "each requeue",
    "notify_time_limit": "90 % of its runtime limit used",
}


# The notify fields a submission's and `notify`'s flags set: each flag's name (`--notify-start`
# on `submit`, `--start` and `--no-start` on `notify`), its field, what it asks, and Slurm's
# option for it.
NOTIFY_FLAGS = (
    ("start", "notify_start", "tell your team's webhook when it starts", "--mail-type=BEGIN"),
    ("requeue", "notify_requeue", "tell your team's webhook each time it is stopped and queued "
     "again", "--mail-type=REQUEUE"),
    ("time-limit", "notify_time_limit", "tell your team's webhook when a run has used 90%% of "
     "its runtime limit", "--mail-type=TIME_LIMIT_90"),
    ("email", "notify_email", "email its submitter what your team's webhook is told of it: its "
     "end, and what the other flags ask", "--mail-user"),
)  # fmt: skip


# Where a job may run, as the API names it: what `where` says, in its order.
CONSTRAINTS = ("gpu_types", "cluster_selector", "exclude_nodes", "features", "first_type_wait_s",
               "exclusive", "only_nodes")  # fmt: skip


def where(
    gpu_types,
    selector: dict,
    excluded=(),
    features=(),
    first_wait=None,
    exclusive=False,
    only=(),
) -> str:
    """Where a job may run, as its events and the CLI say it: "GPU types H100, A100 of
    clusters with region=eu", "any GPU type of any cluster, not on nodes gpu-7, gpu-9",
    "... of any cluster, on nodes with ib, nvme", "GPU types H100, A100 (H100 alone for its
    first 30 min free to run, then any) of ...", "..., each worker on a node to itself",
    "..., only on node gpu-a-03"."""
    gpus = f"GPU types {', '.join(gpu_types)}" if gpu_types else "any GPU type"
    if waits := first_type_wait(gpu_types, first_wait):
        gpus += f" ({waits})"
    labels = ", ".join(f"{k}={v}" for k, v in selector.items())
    said = f"{gpus} of {'clusters with ' + labels if labels else 'any cluster'}"
    if excluded:
        said += f", not on node{'s' if len(excluded) > 1 else ''} {', '.join(excluded)}"
    if features:
        said += f", on nodes with {', '.join(features)}"
    if exclusive:
        said += ", each worker on a node to itself"
    if only:
        said += f", only on node{'s' if len(only) > 1 else ''} {', '.join(only)}"
    return said


def first_type_wait(types: list[str], wait: int | None) -> str:
    """How long a job takes its first GPU type alone (`first_type_wait_s`), as its page and
    `status` say it beside its types ("" when it takes any at once)."""
    if not wait or len(types) < 2:
        return ""
    return f"{types[0]} alone for its first {span(wait)} free to run, then any"


# What an hour of each flavor of the rate card (quotas.Rate) is counted in; any other flavor,
# a gpu:<type>, in GPU-hours.
RATE_UNITS = {"cpu": "core-hour", "memory": "GiB-hour"}


def rate_unit(flavor: str) -> str:
    """What a rate's price buys an hour of: "GPU-hour", "core-hour", "GiB-hour"."""
    return RATE_UNITS.get(flavor, "GPU-hour")


def rate_named(flavor: str) -> str:
    """A rate's flavor for people, as the quotas page's Prices name it: "A100 GPU-hour",
    "CPU core-hour", "Memory GiB-hour"."""
    if flavor.startswith("gpu:"):
        return f"{flavor[4:]} GPU-hour"
    return {"cpu": "CPU core-hour", "memory": "Memory GiB-hour"}.get(flavor, flavor)


def price_written(price: str | Decimal, grouped: bool = False) -> str:
    """A rate's price (the API's "2.500000") to the cent, or to every place it has beyond
    it: "2.50", "0.0125"; `grouped`: thousands apart, as the portal writes money ("1,200.00")."""
    exact = Decimal(price).normalize()  # 2.5, not 2.500000; 1E+2 for 100, written 100 below
    places = max(2, len(f"{exact:f}".partition(".")[2]))
    return f"{exact:{',' if grouped else ''}.{places}f}"


def printable(text: str) -> str:
    """Text from the server made safe to show: each control character written out as \\xNN,
    as `less` does; tab, newline, carriage return and the rest of Unicode kept. Every line the
    CLI prints from the server, and every error that may quote it, goes through here."""
    return CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def segment(text: str) -> str:
    """Text as one segment of the API's path, whatever it holds: `/`, `?` and `#` escaped. A
    name of dots alone would still be resolved away (HTTP clients send `%2E` as `.`): the
    parser refuses those (`written.path_name`)."""
    return quote(text, safe="")


def show(line: str, out=None) -> None:
    """Print a line that holds text from the server."""
    print(printable(line), file=out or sys.stdout, flush=True)


class Unavailable(SystemExit):
    """No answer from the server, or a 5xx (a restart behind a proxy answers 502 or 503):
    the CLI exits with it, unless it may ask again (`wait`)."""


class Api:
    """The server's API at `url`, called with `token` (None: without one, as `login` starts),
    which came from `source` (what a 401 names: MLSCHED_TOKEN, or the credentials file)."""

    def __init__(self, url: str, token: str | None, source: str = "MLSCHED_TOKEN"):
        self.server = url.rstrip("/")
        self.url = self.server + "/api/v1/"
        self.session = requests.Session()
        if token is not None:
            self.session.headers["Authorization"] = f"Token {token}"
        self.source = source
        self.date: datetime | None = None  # the server's clock, as its last answer said it

    def call(self, method: str, path: str, **kwargs) -> dict:
        return self.answer(method, path, **kwargs)[1]

    def answer(self, method: str, path: str, **kwargs) -> tuple[int, dict]:
        """The status and body of the server's answer if it did what was asked (a 204's body:
        {}); its refusal, or no answer, is an error the CLI exits with."""
        response = self.send(method, path, **kwargs)
        # A request the rate limit refused was not carried out, a submission included: asking
        # again is safe, and lets a long `list` or `logs -f` finish. One whose database was lost
        # partway was rolled back (a submission carries its idempotency key, in case it was lost
        # as it committed): asked again a few times, through a restart or a failover.
        unavailable = 0  # 503s asked again in a row
        while (said := asked_again(response, unavailable)) is not None:
            wait = retry_after(response)
            print(f"{said}: asking again in {wait} s", file=sys.stderr, flush=True)
            unavailable += response.status_code == 503
            time.sleep(wait or 1)
            response = self.send(method, path, **kwargs)
        if response.is_redirect:
            where = response.headers.get("Location", "elsewhere")
            raise SystemExit(
                printable(f"{self.url} (MLSCHED_URL) redirects to {where}: use that address")
            )
        if response.status_code >= 400:
            which = f" ({self.source})" if response.status_code == 401 else ""
            error = Unavailable if response.status_code >= 500 else SystemExit
            said = refusal_said(response)
            raise error(printable(f"error {response.status_code}{which}: {said}"))
        if response.status_code == 204:  # done, nothing to say: a deletion
            return 204, {}
        try:
            return response.status_code, response.json()
        except ValueError:
            kind = response.headers.get("Content-Type", "?")
            raise SystemExit(
                printable(
                    f"{self.url} (MLSCHED_URL) did not answer as the mlsched API does"
                    f" (status {response.status_code}, {kind})"
                )
            ) from None

    def now(self) -> datetime:
        """The server's time at its last answer (its Date header, to the second), else this
        machine's: what a job's time waited or run is counted to."""
        return self.date or datetime.now(UTC)

    def send(self, method: str, path: str, **kwargs) -> requests.Response:
        try:
            # Not followed: a redirect would turn a submission into a GET and submit nothing.
            response = self.session.request(
                method, self.url + path, timeout=30, allow_redirects=False, **kwargs
            )
        except requests.RequestException as error:
            raise Unavailable(
                printable(f"cannot reach {self.url} (MLSCHED_URL): {error}")
            ) from None
        self.date = server_date(response) or self.date
        tell_of_release(self.server, response)
        return response


def refusal_said(response: requests.Response) -> str:
    """What an error answer says, on one line and cut short (see shortened): the API's JSON,
    or a proxy's text as written; an HTML page (a proxy's, or the web server's for an address
    the API does not serve: a path it cannot read, a URI too long) by its status's name."""
    if response.headers.get("Content-Type", "").startswith("text/html"):
        return response.reason or "an HTML page"
    return shortened(re.sub(r"\s*\n\s*", " ", response.text.strip()))


# The characters of an error message shown at most: one may quote what it was given, which
# may be text of any length (a name of 70,000 characters, the server's echo of it).
MESSAGE_MAX = 1000


def shortened(text: str, most: int = MESSAGE_MAX) -> str:
    """Text cut to `most` characters, saying how many more there were."""
    if len(text) <= most:
        return text
    return f"{text[:most]}... ({len(text) - most:,} characters more)"


def server_date(response: requests.Response) -> datetime | None:
    """The time the answer's Date header gives (UTC), None without a readable one."""
    try:
        date = parsedate_to_datetime(response.headers.get("Date", ""))
    except (TypeError, ValueError):
        return None
    return date.astimezone(UTC) if date.tzinfo else date.replace(tzinfo=UTC)


def asked_again(response: requests.Response, unavailable: int) -> str | None:
    """Why a refused request is asked again once its Retry-After has passed (one of at most
    MAX_RETRY_AFTER_S): a 429, or a 503 after fewer than MAX_UNAVAILABLE_RETRIES in a row;
    None if it is not."""
    if retry_after(response) is None:
        return None
    if response.status_code == 429:
        return "rate limited"
    if response.status_code == 503 and unavailable < MAX_UNAVAILABLE_RETRIES:
        return "the server is unavailable"
    return None


def retry_after(response: requests.Response) -> int | None:
    """The seconds a 429's or 503's Retry-After asks to wait, if a number of them up to
    MAX_RETRY_AFTER_S; None otherwise."""
    seconds = response.headers.get("Retry-After", "")
    # Not converted past a few digits: Python refuses strings of over 4,300.
    short = len(seconds) <= len(str(MAX_RETRY_AFTER_S))
    if seconds.isascii() and seconds.isdigit() and short and int(seconds) <= MAX_RETRY_AFTER_S:
        return max(int(seconds), 1)
    return None
