"""What users write on the command line, read: job descriptions (JSON or YAML), times
(now+2h), dependencies as Slurm writes them, data volumes, shard lists, labels, limits, exit
codes, and the server's address."""

import argparse
import json
import math
import re
from urllib.parse import urlsplit

import yaml

from jobs.cli.client import STATES


class _YamlLoader(yaml.SafeLoader):
    """YAML's safe loader, times left as written: `begin: 2026-12-03T02:00:00Z` is text the
    API reads, not a date the JSON body could not carry."""


_YamlLoader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def job_description(text: str) -> object:
    """A job description as `submit` reads it: JSON (the API's body, `spec ID`'s), or YAML
    (`spec ID --yaml`'s; times as written). Raises ValueError naming both when it is
    neither, and saying why when it is no body the API can be sent (`sendable`)."""
    try:
        found = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep") from None
    except ValueError as not_json:
        try:
            found = yaml.load(text, Loader=_YamlLoader)  # a SafeLoader, times kept as text
        except yaml.YAMLError as not_yaml:
            said = " ".join(str(not_yaml).split())  # one line: the parser's spans several
            raise ValueError(f"not JSON ({not_json}) nor YAML ({said})") from None
        except RecursionError:
            raise ValueError("nested too deep") from None
        if not isinstance(found, dict):
            raise ValueError(f"not JSON ({not_json}), and its YAML is no mapping") from None
    sendable(found)
    return found


MAX_DEPTH = 100  # lists and mappings within each other (a job description has a few)
# The values of a description, its YAML's aliases expanded: a few lines of aliases naming
# aliases ("billion laughs") would otherwise make billions, and the CLI would never send them.
MAX_VALUES = 100_000
JSON_KEYS = (str, int, float, bool, type(None))


def sendable(found: object) -> None:
    """Raise ValueError saying why what JSON or YAML gave is no JSON body: a value JSON has no
    kind for (YAML's !!binary, !!set, !!timestamp), NaN or an infinite number, more than
    MAX_DEPTH levels, an alias inside what it names, or over MAX_VALUES values. Walked without
    recursion, each list or mapping an alias names counted once."""
    counts: dict[int, int] = {}  # the values in each list or mapping counted, by its id
    inside: set[int] = set()  # those being counted: each holds the next
    pending: list[tuple[object, int, bool]] = [(found, 1, False)]
    while pending:
        value, depth, counted = pending.pop()
        if not isinstance(value, list | dict):
            scalar_sendable(value)
            continue
        items = list(value.values()) if isinstance(value, dict) else value
        if counted:
            inside.discard(id(value))
            counts[id(value)] = 1 + sum(counts.get(id(item), 1) for item in items)
            if counts[id(value)] > MAX_VALUES:
                raise ValueError(f"over {MAX_VALUES:,} values once its YAML's aliases are "
                                 "expanded")  # fmt: skip
            continue
        if id(value) in inside:
            raise ValueError("its YAML holds itself (an alias inside what it names)")
        if id(value) in counts:
            continue
        if depth > MAX_DEPTH:
            raise ValueError("nested too deep")
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, JSON_KEYS):
                    raise ValueError(f"a key JSON has no kind for: {key!r:.60}")
                scalar_sendable(key)
        inside.add(id(value))
        pending.append((value, depth, True))
        pending.extend((item, depth + 1, False) for item in items)


def scalar_sendable(value: object) -> None:
    """Raise ValueError for a value no JSON body carries."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is no number JSON has")
    if not isinstance(value, JSON_KEYS):
        raise ValueError(f"a value JSON has no kind for: {value!r:.60}")


def yaml_written(spec: object) -> str:
    """A job description as YAML, in the API's order of its fields, that `submit` reads back
    the same (text that YAML would read otherwise, "no", "1.0", is quoted)."""
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=100)


# A time from now, as Slurm's sbatch --begin and sacct -S write it: "now", "now+2h", "now-1d"
# (s, m, h or d; seconds without a unit). The API reads it by the server's clock
# (jobs.fields.ZonedTime); the CLI checks it and sends it as written.
RELATIVE = re.compile(r"now(?:([+-])(\d{1,9})([smhd]?))?")


UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds_from_now(text: str) -> int | None:
    """The seconds a RELATIVE time is from now (negative: before), None for another text."""
    relative = RELATIVE.fullmatch(text)
    if relative is None:
        return None
    sign, count, unit = relative.groups()
    return int(count or 0) * UNIT_SECONDS[unit or ""] * (-1 if sign == "-" else 1)


def time_written(text: str) -> str:
    """A TIME as the API takes it (--begin's, --deadline's, list's --since and --until):
    "now+N" or "now-N" with a unit (s, m, h or d; seconds without one), or "now", sent as
    written, for the server to read by its own clock; anything else goes as written too (the
    server wants ISO 8601 with a zone, or for a list a day, and says what is wrong)."""
    if text.startswith("now") and seconds_from_now(text) is None:
        raise argparse.ArgumentTypeError(f"not now+N[s|m|h|d], now-N nor a time: {text!r}")
    return text


SINGLETON = "singleton"


NONE = "none"  # no dependencies, as `depend` prints them


def dependencies_written(text: str) -> tuple[list, bool]:
    """Dependencies written as Slurm's --dependency writes them: the API's depends_on items,
    and whether the text says "singleton".

    Split by commas or spaces: a job id ("12", or "#12" as the portal shows it) waits for its
    job to succeed (afterok); "KIND:ID[:ID...]" gives its ids a kind (afterok, afterany,
    afternotok), and the bare ids after it too ("afterany:12,13"). What is no id, or no kind,
    goes on as written, for the server to name. "none" alone is no dependencies. The command
    line's and the portal's one reading of it (jobs.forms): this module runs without Django.
    """
    if text.strip() == NONE:
        return [], False
    items, kind, singleton = [], None, False
    for word in filter(None, re.split(r"[\s,]+", text)):
        if word == SINGLETON:
            singleton = True
            continue
        if ":" in word:
            kind, _, word = word.partition(":")
        for written in word.split(":"):
            pk = written.removeprefix("#")
            value = int(pk) if pk.isascii() and pk.isdigit() else pk
            items.append(value if kind is None else {"id": value, "kind": kind})
    return items, singleton


def dependency_items(text: str) -> list:
    """The depends_on items of dependencies as Slurm writes them (`dependencies_written`)."""
    return dependencies_written(text)[0]


def slurm_form(links: list[dict], singleton: bool) -> str:
    """A job's dependencies ([{"id", "kind"}]) as Slurm's --dependency writes them
    ("afterok:12:13,afterany:14,singleton"), "none" for none."""
    by_kind: dict[str, list[str]] = {}
    for link in links:
        by_kind.setdefault(link["kind"], []).append(str(link["id"]))
    parts = [f"{kind}:{':'.join(ids)}" for kind, ids in by_kind.items()]
    return ",".join(parts + ([SINGLETON] if singleton else [])) or NONE


WRITES, READS = ":rw", ":ro"


def mount_written(text: str) -> dict:
    """A data volume as --volume and the portal's field write it, NAME:PATH (read only, as
    NAME:PATH:ro) or NAME:PATH:rw (to write to it, as docker run -v), as the API's volumes
    item. ValueError for text without a name and a path; what they are goes on as written,
    for the server to name. The command line's and the portal's one reading (jobs.forms)."""
    name, colon, path = text.strip().partition(":")
    read_only = not path.endswith(WRITES)
    path = path.removesuffix(READS if read_only else WRITES)
    if not (name and colon and path):
        raise ValueError(f"not NAME:PATH or NAME:PATH:rw: {text!r}")
    return {"name": name, "path": path, "read_only": read_only}


def volume_option(text: str) -> dict:
    """--volume's NAME:PATH[:rw] (mount_written)."""
    try:
        return mount_written(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# No limit on a batch's shards running at once, as shard-limit takes it; no fewest workers
# (all of them together), as min-workers takes it.
NO_LIMIT = "none"


def limit_written(text: str) -> int | str:
    """shard-limit's and min-workers' N: a whole number above 0, or "none"."""
    return text if text == NO_LIMIT else positive(text)


DURATION = re.compile(r"(\d{1,9})([smhd]?)")


def duration_written(text: str) -> int:
    """runtime-limit's DURATION: a whole number of seconds, or of minutes, hours or days with
    a unit ("90m", "12h", "2d"), made seconds (the server says what it allows)."""
    written = DURATION.fullmatch(text)
    if written is None:
        raise argparse.ArgumentTypeError(f"not N[s|m|h|d]: {text!r}")
    count, unit = written.groups()
    return int(count) * UNIT_SECONDS[unit]


UNSUCCEEDED = "unsucceeded"


INDEXES = re.compile(r"[0-9]{1,9}(?:,[0-9]{1,9})*")


def shard_choice(text: str) -> str | list[int]:
    """--shards: "unsucceeded", or shard indexes separated by commas ("3,17,512")."""
    if text == UNSUCCEEDED:
        return text
    if not INDEXES.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not {UNSUCCEEDED} nor indexes like 3,17,512: {text!r}")
    return [int(word) for word in text.split(",")]


def label_written(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not (key and equals):
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key, value


def names_in(text: str) -> list[str]:
    """Names with commas, spaces around them and empty ones left out ("h100, a100"), as the
    portal's forms and the command line take GPU types and secrets."""
    return [name.strip() for name in text.split(",") if name.strip()]


def names_written(text: str) -> list[str]:
    """Names with commas (h100,a100), at least one."""
    names = names_in(text)
    if not names:
        raise argparse.ArgumentTypeError(f"no names: {text!r}")
    return names


def path_name(text: str) -> str:
    """A name sent as one segment of the API's path (a team, user, secret, cluster or node).
    Not empty, and not dots alone: a `.` or `..` segment is resolved away on its way (HTTP
    clients and proxies treat it as the folder or its parent), so the call would reach another
    address, the team's own for `secret-delete alpha ..`."""
    if not text.strip("."):
        raise argparse.ArgumentTypeError(
            f"{text!r} cannot be sent as a name: not empty nor dots alone"
        )
    return text


def features_written(text: str) -> list[str]:
    """Features as Slurm's --constraint writes those all required, joined by & ("ib&nvme"),
    or with commas, at least one."""
    return names_written(text.replace("&", ","))


# The exit codes a job may ask to retry on: a process's own (a process killed by signal N is
# 128+N, as a shell and Kubernetes give it).
EXIT_CODES = range(1, 256)
EXIT_CODE_RANGE = re.compile(r"([0-9]{1,3})(?:-([0-9]{1,3}))?")


def exit_codes_in(text: str) -> list[int]:
    """Exit codes with commas or spaces, a run of them as FIRST-LAST ("75, 128-255"), each
    from 1 to 255, in order and once each, as the portal's form and the command line take
    retry_exit_codes; ValueError naming what is not one."""
    codes: set[int] = set()
    for word in filter(None, re.split(r"[\s,]+", text)):
        written = EXIT_CODE_RANGE.fullmatch(word)
        first, last = (int(written[1]), int(written[2] or written[1])) if written else (0, -1)
        if not (written and first in EXIT_CODES and last in EXIT_CODES and first <= last):
            raise ValueError(f"{word[:20]!r} is no exit code from 1 to 255, nor a run of them "
                             "(128-255).")  # fmt: skip
        codes.update(range(first, last + 1))
    return sorted(codes)


def exit_codes_written(text: str) -> list[int]:
    """submit --retry-exit-codes: exit codes as exit_codes_in reads them, at least one."""
    try:
        codes = exit_codes_in(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not codes:
        raise argparse.ArgumentTypeError(f"no exit codes: {text!r}")
    return codes


def exit_codes_said(codes: list[int]) -> str:
    """Exit codes as exit_codes_in reads them, three or more in a row as a run: "75, 128-255"."""
    runs: list[list[int]] = []
    for code in sorted(codes):
        if runs and code == runs[-1][-1] + 1:
            runs[-1].append(code)
        else:
            runs.append([code])
    return ", ".join(
        f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs
    )


def states_written(text: str) -> str:
    """list --state: a job state, or several with commas ("queued,running", as Slurm's
    squeue -t PD,R), as the API's `state` takes them."""
    states = [state.strip() for state in text.split(",") if state.strip()]
    unknown = [state for state in states if state not in STATES]
    if not states or unknown:
        said = ", ".join(unknown) or repr(text)
        raise argparse.ArgumentTypeError(f"not a state: {said} (one of {', '.join(STATES)})")
    return ",".join(states)


MAX_TAIL = 5000  # the lines a tail read gives at most (the API's, jobs.api.MAX_TAIL)


def tail_written(text: str) -> int:
    """logs --tail N: a whole number of lines from 1 to MAX_TAIL."""
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_TAIL):
        raise argparse.ArgumentTypeError(f"not a number of lines from 1 to {MAX_TAIL}: {text!r}")
    return int(text)


# The largest whole number an option takes: the API's (PostgreSQL's bigint), and the most a
# count of lines or jobs to show (itertools.islice) takes.
MAX_WHOLE = 2**63 - 1


def positive(text: str) -> int:
    if not (text.isascii() and text.isdigit() and text.strip("0")):
        raise argparse.ArgumentTypeError(f"not a whole number above 0: {text!r}")
    return at_most_max_whole(text)


def natural(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return at_most_max_whole(text)


def at_most_max_whole(digits: str) -> int:
    """ASCII digits as a number, refused past MAX_WHOLE."""
    significant = digits.lstrip("0") or "0"
    # Counted first: Python converts no more than 4,300 digits.
    if len(significant) > len(str(MAX_WHOLE)) or int(significant) > MAX_WHOLE:
        raise argparse.ArgumentTypeError(f"{digits[:40]!r} is past the largest number taken, "
                                         "2**63-1")  # fmt: skip
    return int(significant)


def http_address(url: str) -> bool:
    """An http:// or https:// address of a host (and a port that is a number)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is no number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def sends_token_safely(url: str) -> bool:
    """Over HTTPS, or plain HTTP to this machine only."""
    parts = urlsplit(url)
    return parts.scheme == "https" or parts.hostname in ("localhost", "127.0.0.1", "::1")
