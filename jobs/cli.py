"""mlsched's command line, over the REST API: `python -m jobs.cli COMMAND ...`.

    submit FILE [--dependency DEPS] [--begin TIME] [--deadline TIME] [--max-running N]
                [--label KEY=VALUE ...] [--test-only]
                     submit the job described in a JSON file ("-" for standard input); DEPS
                     adds to its depends_on, as Slurm's --dependency writes them: job ids
                     to wait for them to succeed ("12,13"), or a kind and its ids
                     ("afterany:12:13", "afternotok:14"; ids after it take its kind too),
                     and "singleton" to wait for your earlier jobs of its name to end
                     ("afterok:12,singleton"); --depends-on is the same option. --begin
                     TIME sets its begin, as Slurm's --begin: not started before then, a time
                     with its zone ("2026-12-03T02:00:00Z") or from now ("now+90m", "now+2h";
                     s, m, h, d, seconds without a unit). --deadline TIME, written the same
                     way, as Slurm's --deadline: canceled while queued once it could no longer
                     end by then (started at once and running its max_runtime_s).
                     --max-running N: at most N of a batch's shards run at once, the others
                     waiting until one ends, as Slurm's --array=0-999%N (its
                     max_running_shards). --label KEY=VALUE adds a label of your own to
                     its labels (again for more), to find it by (list --label).
                     --test-only submits nothing: it prints whether the scheduler would
                     start the job now and where, or why it would wait and its estimated
                     start, as Slurm's sbatch --test-only
    depend ID DEPS   replace a queued job's dependencies with DEPS, written as above ("" or
                     "none" for none): Slurm's scontrol update dependency=
    list [--state S] [--held] [--batch ID] [--label KEY=VALUE ...] [--limit N]
                     your jobs, newest first (all of them, or the newest N): id, state,
                     family, submitter, GPUs asked (workers x GPUs each, a share in
                     thousandths: 250m), name and why it waits; --held: only
                     the held ones; --batch: the shards of one batch (its id: the job its
                     submission returned); --label: those carrying the label (KEY alone:
                     with any value), each --label narrowing the rest
    status ID        one job, as JSON (a batch: its shards by state, shard_states, and its
                     limit on shards running at once, max_running_shards)
    cancel [ID ...] [--name NAME] [--state S] [--tenant SLUG] [--mine] [--label KEY=VALUE ...]
                     cancel a job (a batch: every shard), or every live job you may cancel
                     that the ids and filters name together, as Slurm's scancel does
                     (--label: those carrying every label given, a sweep's jobs)
    hold ID          keep a queued job (a batch: its queued shards) from starting
    release ID       let a held job start again
    requeue ID [--hold]
                     stop a scheduled or running job (a batch: its running shards), with its
                     grace period to checkpoint, and queue it again without using a retry, as
                     Slurm's scontrol requeue; --hold: held once queued (requeuehold)
    priority ID [--class NAME] [--value N]
                     move a queued job (a batch: its queued shards) to another priority class,
                     or to another priority within its class (-1000 to 1000)
    shard-limit ID N|none
                     let at most N of a queued or running batch's shards run at once from
                     now on ("none": no limit), as Slurm's scontrol update
                     ArrayTaskThrottle=; a lower limit stops no shard, the batch starts no
                     more until fewer run
    resubmit ID [--shards unsucceeded|3,17,512]
                     run an ended job again as a new job with the same spec (a batch: all of
                     it); --shards: only the batch's shards that did not succeed (failed or
                     were canceled), or those named, as Slurm's sbatch --array=3,17,512; each
                     keeps its index and the batch's shard count
    logs ID [-f] [--shard N]
                     a job's output; -f follows it until the job ends. A batch's shards
                     each have their own: its id alone shows shard 0's (a rerun of some
                     shards: its lowest's; it says so on standard error), --shard N shard
                     N's (0 to shards-1), as Slurm's ID_N names a task of a job array
    usage [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--tenant SLUG]
                     GPU-hours, CPU core-hours, waste, jobs finished and queue waits of your
                     tenants, by GPU type (default: the last 30 days)
    quota [--tenant SLUG]
                     per tenant and flavor: guaranteed, borrow limit, in use, borrowed, and
                     how much more it may start now; jobs queued and waiting for quota
    classes [--tenant SLUG]
                     the priority classes your tenants may submit at: value, whether it may
                     preempt, its exempt time and longest runtime limit, which tenants
    maintenance      the clusters' maintenance windows not yet ended: cluster, nodes ("all":
                     every node of it), from, to (UTC), in progress or upcoming, reason. Until
                     a window starts only work sure to end by then is placed on its nodes;
                     from then to its end nothing is, and work still there is requeued
    bookings [--tenant SLUG]
                     your tenants' bookings not yet ended (--tenant: one of them), as
                     maintenance lists windows, each with its tenant. From a booking's start
                     to its end only its tenant's work starts on its nodes, and other
                     tenants' work still there is requeued; before the start, only its
                     tenant's work and work sure to end by then is placed there
    clusters         each cluster, as Slurm's sinfo: its agent's health, its nodes by state
                     (idle, mixed, allocated, other: down, maintenance, quarantined,
                     drained, draining, booked for another team) and per GPU type its GPUs,
                     allocated, and idle on nodes that would take your work now
    nodes [--cluster NAME] [--state S] [--gpu-type TYPE]
                     every node, as Slurm's sinfo -N: its state, GPU type, GPUs, CPUs and
                     memory (GiB) allocated of all, and its next maintenance window or
                     booking (yours: for one of your teams)

MLSCHED_URL (default http://127.0.0.1:8000) and MLSCHED_TOKEN (a personal API token from the
portal's API tokens page, /tokens/) say where and who. Plain HTTP: no Django needed.

An error exits 1 with one line on standard error (2, after a usage line, for a wrong command
line). A request the
server's rate limit refuses is asked again once its Retry-After has passed, if that is at most
a minute away; further away, it is an error that says when.
"""

import argparse
import itertools
import json
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import requests

TERMINAL = {"succeeded", "failed", "canceled"}
STATES = ["queued", "scheduled", "running", *sorted(TERMINAL)]
MAX_RETRY_AFTER_S = 60  # a 429 asking for a longer wait is reported, not waited out

# C0 and C1 control characters and DEL, but tab, newline and carriage return (a progress bar
# redraws its line with it): in a job's output or name they would reach the reader's terminal
# as commands (move the cursor, clear the screen, set the window title, write to the
# clipboard). 0x9b alone starts a sequence on some terminals.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Text from the server made safe to show: each control character written out as \\xNN,
    as `less` does; tab, newline, carriage return and the rest of Unicode kept. Every line the
    CLI prints from the server, and every error that may quote it, goes through here."""
    return CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def show(line: str, out=None) -> None:
    """Print a line that holds text from the server."""
    print(printable(line), file=out or sys.stdout, flush=True)


class Api:
    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/") + "/api/v1/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, **kwargs) -> dict:
        response = self.send(method, path, **kwargs)
        # A request the rate limit refused was not carried out, a submission included: asking
        # again is safe, and lets a long `list` or `logs -f` finish.
        while response.status_code == 429 and (wait := retry_after(response)) is not None:
            print(f"rate limited: asking again in {wait} s", file=sys.stderr, flush=True)
            time.sleep(wait)
            response = self.send(method, path, **kwargs)
        if response.is_redirect:
            where = response.headers.get("Location", "elsewhere")
            raise SystemExit(
                printable(f"{self.url} (MLSCHED_URL) redirects to {where}: use that address")
            )
        if response.status_code >= 400:
            which = " (MLSCHED_TOKEN)" if response.status_code == 401 else ""
            raise SystemExit(printable(f"error {response.status_code}{which}: {response.text}"))
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("Content-Type", "?")
            raise SystemExit(
                printable(
                    f"{self.url} (MLSCHED_URL) did not answer as the mlsched API does"
                    f" (status {response.status_code}, {kind})"
                )
            ) from None

    def send(self, method: str, path: str, **kwargs) -> requests.Response:
        try:
            # Not followed: a redirect would turn a submission into a GET and submit nothing.
            return self.session.request(
                method, self.url + path, timeout=30, allow_redirects=False, **kwargs
            )
        except requests.RequestException as error:
            raise SystemExit(printable(f"cannot reach {self.url} (MLSCHED_URL): {error}")) from None


def retry_after(response: requests.Response) -> int | None:
    """The seconds a 429's Retry-After asks to wait, if a number of them up to
    MAX_RETRY_AFTER_S; None otherwise."""
    seconds = response.headers.get("Retry-After", "")
    # Not converted past a few digits: Python refuses strings of over 4,300.
    short = len(seconds) <= len(str(MAX_RETRY_AFTER_S))
    if seconds.isascii() and seconds.isdigit() and short and int(seconds) <= MAX_RETRY_AFTER_S:
        return max(int(seconds), 1)
    return None


def submit(api: Api, args) -> None:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        spec = json.loads(text)
    except (OSError, ValueError) as error:
        raise SystemExit(f"{args.file}: not a readable JSON job description: {error}") from None
    if args.depends_on:
        if not isinstance(spec, dict) or not isinstance(spec.get("depends_on", []), list):
            raise SystemExit(f"{args.file}: not a job description with a list in depends_on")
        added, singleton = [], False
        for text in args.depends_on:  # each on its own: a kind holds until its option's end
            items, says_singleton = dependencies_written(text)
            added, singleton = [*added, *items], singleton or says_singleton
        spec["depends_on"] = [*spec.get("depends_on", []), *added]
        if singleton:
            spec["singleton"] = True
    if args.label:
        if not isinstance(spec, dict) or not isinstance(spec.get("labels", {}), dict):
            raise SystemExit(f"{args.file}: not a job description with a mapping in labels")
        spec["labels"] = {**spec.get("labels", {}), **dict(args.label)}
    given = {"begin": args.begin, "deadline": args.deadline, "max_running_shards": args.max_running}
    for field, value in given.items():
        if value is not None:
            if not isinstance(spec, dict):
                raise SystemExit(f"{args.file}: not a job description")
            spec[field] = value
    if args.test_only:
        answer = api.call("POST", "jobs/test/", json=spec)
        show(trial_line(answer))
        if answer["notes"]:
            show(" ".join(answer["notes"]))
        return
    job = api.call("POST", "jobs/", json=spec)
    show(f"{job['id']} {job['state']}")


def trial_line(answer: dict) -> str:
    """A test-only submission's answer in a line: where it would start now, or why its first
    job that would not (a batch: which shard) waits, and its estimated start."""
    jobs = answer["jobs"]
    placed = [job for job in jobs if job["status"] == "placed"]
    where = ", ".join(sorted({name for job in placed for name in job["clusters"]}))
    what = f"{len(jobs)} shards" if len(jobs) > 1 else f"{jobs[0]['nodes']} node(s)"
    start = f"estimated start {answer['estimated_start'] or 'unknown'}"
    if answer["starts_now"]:
        return f"would start now on {where} ({what})"
    if len(placed) == len(jobs):
        return f"would fit now on {where} ({what}), but waits: {start}"
    waits = next(job for job in jobs if job["status"] != "placed")
    # "fit now": a begin to come or a dependency keeps even those from starting now.
    which = f"{len(placed)} of {len(jobs)} shards fit now; shard {waits['shard_index']} "
    return (
        f"{which if len(jobs) > 1 else ''}would wait: {waits['pending_reason']}: "
        f"{waits['pending_message']}; {start}"
    )


RELATIVE = re.compile(r"now(?:\+(\d{1,9})([smhd]?))?")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def time_written(text: str) -> str:
    """--begin's and --deadline's TIME as the API takes it: "now+N" with a unit (s, m, h or d;
    seconds without one), or "now", made a UTC time from this machine's clock, to the second;
    anything else goes as written (the server wants ISO 8601 with a zone and says what is
    wrong)."""
    if not text.startswith("now"):
        return text
    relative = RELATIVE.fullmatch(text)
    if relative is None:
        raise argparse.ArgumentTypeError(f"not now+N[s|m|h|d] nor a time: {text!r}")
    count, unit = relative.groups()
    ahead = int(count or 0) * UNIT_SECONDS[unit or ""]
    try:
        moment = datetime.fromtimestamp(int(time.time()) + ahead, tz=UTC)
    except (OverflowError, OSError, ValueError):  # past the year 9999
        raise argparse.ArgumentTypeError(f"too far ahead: {text!r}") from None
    return moment.isoformat().replace("+00:00", "Z")


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


def depend(api: Api, args) -> None:
    """Replace a queued job's dependencies; print them as Slurm writes them."""
    items, singleton = dependencies_written(args.deps)
    body = {"depends_on": items, "singleton": singleton}
    job = api.call("POST", f"jobs/{args.id}/dependencies/", json=body)
    show(f"{job['id']} {slurm_form(job['dependencies'], job['singleton'])}")


def slurm_form(links: list[dict], singleton: bool) -> str:
    """A job's dependencies ([{"id", "kind"}]) as Slurm's --dependency writes them
    ("afterok:12:13,afterany:14,singleton"), "none" for none."""
    by_kind: dict[str, list[str]] = {}
    for link in links:
        by_kind.setdefault(link["kind"], []).append(str(link["id"]))
    parts = [f"{kind}:{':'.join(ids)}" for kind, ids in by_kind.items()]
    return ",".join(parts + ([SINGLETON] if singleton else [])) or NONE


def list_jobs(api: Api, args) -> None:
    params = {"state": args.state, "held": 1 if args.held else None, "batch": args.batch,
              "label": args.label}  # fmt: skip
    params = {key: value for key, value in params.items() if value is not None}
    for job in itertools.islice(all_jobs(api, params), args.limit):
        why = f"  ({job['pending_reason']})" if job["pending_reason"] else ""
        show(f"{job['id']:>8}  {job['state']:<10} {job['family']:<16} {job['owner']:<12} "
             f"{gpus_asked(job):<7} {job['name']}{why}")  # fmt: skip


def gpus_asked(job: dict) -> str:
    """The GPUs a job asks, as the portal's list says them: workers x GPUs each ("4x8"), a
    share in thousandths ("250m"), or "none"."""
    each = str(job["gpus"]) if job["gpus"] else f"{job['gpu_milli']}m" if job["gpu_milli"] else ""
    if not each:
        return "none"
    return f"{job['workers']}x{each}" if job["workers"] > 1 else each


def all_jobs(api: Api, params: dict):
    """The listing page after page: a full page's `next` is its last id, to ask for those before."""
    while True:
        page = api.call("GET", "jobs/", params=params)
        yield from page["jobs"]
        if page["next"] is None:
            return
        params = {**params, "before": page["next"]}


def status(api: Api, args) -> None:
    show(json.dumps(api.call("GET", f"jobs/{args.id}/"), indent=2))


def cancel(api: Api, args) -> None:
    """One job by its id: its state after. Otherwise the jobs the ids and filters name, asked
    again while the server says there are more: how many were canceled."""
    filters = {"name": args.name, "state": args.state, "tenant": args.tenant,
               "labels": dict(args.label) if args.label else None}  # fmt: skip
    filters = {key: value for key, value in filters.items() if value is not None}
    if len(args.ids) == 1 and not filters and not args.mine:
        show(api.call("POST", f"jobs/{args.ids[0]}/cancel/")["state"])
        return
    if args.ids:
        filters["ids"] = args.ids
    if args.mine:
        filters["mine"] = True
    canceled, more = 0, True
    while more:
        answer = api.call("POST", "jobs/cancel/", json=filters)
        canceled, more = canceled + len(answer["canceled"]), answer["more"]
    show(f"canceled {canceled} job{'s' if canceled != 1 else ''}")


def priority(api: Api, args) -> None:
    """How many jobs now have the priority asked (a batch: its queued shards)."""
    asked = {"priority_class": args.priority_class, "priority": args.value}
    answer = api.call("POST", f"jobs/{args.id}/priority/",
                      json={k: v for k, v in asked.items() if v is not None})  # fmt: skip
    changed = answer["changed"]
    show(f"priority {answer['priority_class']} {answer['priority']:+d} for {changed} "
         f"job{'s' if changed != 1 else ''}")  # fmt: skip


NO_LIMIT = "none"  # no limit on a batch's shards running at once, as shard-limit takes it


def shard_limit(api: Api, args) -> None:
    """How many of the batch's shards may now run at once, and how many shard rows changed."""
    body = {"max_running_shards": None if args.limit == NO_LIMIT else args.limit}
    answer = api.call("POST", f"jobs/{args.id}/shard-limit/", json=body)
    limit, changed = answer["max_running_shards"], answer["changed"]
    said = f"at most {limit} of its shards" if limit is not None else "no limit on its shards"
    show(f"batch {answer['id']}: {said} running at once ({changed} shards)")


def limit_written(text: str) -> int | str:
    """shard-limit's N: a whole number above 0, or "none"."""
    return text if text == NO_LIMIT else positive(text)


def requeue(api: Api, args) -> None:
    """`requeue ID [--hold]`: how many jobs were asked to stop and queued again."""
    changed = api.call("POST", f"jobs/{args.id}/requeue/", json={"hold": args.hold})["changed"]
    held = ", held once queued" if args.hold else ""
    show(f"requeued {changed} job{'s' if changed != 1 else ''}{held}")


def hold(api: Api, args) -> None:
    """`hold` or `release` (the command's name is the API's verb): how many jobs it changed
    (a batch: its queued shards)."""
    changed = api.call("POST", f"jobs/{args.id}/{args.command}/")["changed"]
    done = "held" if args.command == "hold" else "released"
    show(f"{done} {changed} job{'s' if changed != 1 else ''}")


UNSUCCEEDED = "unsucceeded"
INDEXES = re.compile(r"[0-9]{1,9}(?:,[0-9]{1,9})*")


def shard_choice(text: str) -> str | list[int]:
    """--shards: "unsucceeded", or shard indexes separated by commas ("3,17,512")."""
    if text == UNSUCCEEDED:
        return text
    if not INDEXES.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not {UNSUCCEEDED} nor indexes like 3,17,512: {text!r}")
    return [int(word) for word in text.split(",")]


def resubmit(api: Api, args) -> None:
    body = {} if args.shards is None else {"shards": args.shards}
    job = api.call("POST", f"jobs/{args.id}/resubmit/", json=body)
    show(f"{job['id']} {job['state']}")


def logs(api: Api, args) -> None:
    """Print the job's log (a batch's: one shard's); with --follow, until the job has ended.
    Its state is read after a page with nothing new, so the log is read once more once it has
    ended: the lines it wrote just before it ended are shown."""
    job_id = log_source(api, args.id, getattr(args, "shard", None))
    after, ended = 0, not args.follow
    while True:
        page = api.call("GET", f"jobs/{job_id}/logs/", params={"after": after})
        for line in page["lines"]:
            out = sys.stderr if line["stream"] == "stderr" else sys.stdout
            show(f"[{line['attempt']}.{line['worker']}] {line['text']}", out)
        after = page["next"]
        if page["lines"]:
            continue
        if ended:
            return
        ended = api.call("GET", f"jobs/{job_id}/")["state"] in TERMINAL
        if not ended:
            time.sleep(1)


def log_source(api: Api, job_id: int, shard: int | None) -> int:
    """The job whose log `logs` shows: `job_id`, or its shard `shard`. Each shard of a batch
    is a job with its own log; the batch's id is its first shard's, which is shown, with a note
    on standard error, when no shard is named."""
    job = api.call("GET", f"jobs/{job_id}/")
    if job["parent"] is not None:
        if shard is None:
            return job_id
        raise SystemExit(f"job {job_id} is shard {job['shard_index']} of batch {job['parent']}:"
                         f" ask for `logs {job['parent']} --shard {shard}`")  # fmt: skip
    shards, first = job["shards"], job["shard_index"] or 0
    # A rerun of some of a batch's shards has fewer, each keeping its index: its first may
    # not be shard 0.
    rows = sum(job.get("shard_states", {}).values()) or shards
    if shard is None:
        if shards > 1:
            count = f"{shards}" if rows == shards else f"{rows} (of {shards})"
            # A rerun of some shards has only some of the indexes: listed, not 0 to N-1.
            which = f"0 to {shards - 1}" if rows == shards else f"list them: list --batch {job_id}"
            print(f"job {job_id} is a batch of {count} shards: showing shard {first}'s log;"
                  f" --shard N shows shard N's ({which})", file=sys.stderr)  # fmt: skip
        return job_id
    if shard >= shards:
        which = f"its shards are 0 to {shards - 1}" if shards > 1 else "it is not a batch"
        raise SystemExit(f"job {job_id} has no shard {shard}: {which}")
    if shard == first:
        return job_id
    found = api.call("GET", "jobs/", params={"batch": job_id, "shard": shard})["jobs"]
    if not found and rows < shards:
        raise SystemExit(f"job {job_id} has no shard {shard} you may see: it runs {rows} of the"
                         f" {shards} shards (list them: list --batch {job_id})")  # fmt: skip
    if not found:  # a job shared with the user alone (a grant) shares none of its shards
        raise SystemExit(f"shard {shard} of job {job_id} is not one you may see")
    return found[0]["id"]


USAGE_HEADER = ["tenant", "gpu type", "GPU-h", "CPU core-h", "wasted GPU-h", "preempted",
                "succeeded", "failed", "canceled", "started", "mean wait s",
                "p95 wait s"]  # fmt: skip
FIGURES = ["gpu_hours", "cpu_core_hours", "wasted_gpu_hours", "preempted_gpu_hours"]


def usage(api: Api, args) -> None:
    params = {name: getattr(args, name) for name in ("since", "until", "tenant")}
    report = api.call("GET", "usage/", params={k: v for k, v in params.items() if v})
    show(f"from {report['since']} to {report['until']}, running attempts counted to "
         f"{report['counted_to']}")  # fmt: skip
    if report["incomplete"]:
        show(f"note: jobs finished before {report['pruned_before']} have been deleted (retention)")
    table([USAGE_HEADER, *usage_rows(report["tenants"])])


def table(rows: list[list[str]], names: int = 2, notes: int = 0) -> None:
    """Rows in aligned columns: the first `names` and the last `notes` to the left, figures
    to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    figures = range(names, len(widths) - notes)
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in figures else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]  # fmt: skip
        show("  ".join(cells).rstrip())


def usage_rows(tenants: list[dict]):
    """Per tenant, its totals and jobs' figures (GPU type "all"), then a row per GPU type."""
    for t in tenants:
        waits = t["queue_wait"]
        jobs = [
            *(str(t["jobs_finished"][s]) for s in ("succeeded", "failed", "canceled")),
            str(waits["jobs_started"]),
            *("-" if waits[k] is None else f"{waits[k]:.0f}" for k in ("mean_s", "p95_s")),
        ]
        yield [t["tenant"], "all", *(f"{t[k]:.2f}" for k in FIGURES), *jobs]
        for u in t["by_gpu_type"]:
            kind = {None: "unknown", "": "none"}.get(u["gpu_type"], u["gpu_type"])
            yield [t["tenant"], kind, *(f"{u[k]:.2f}" for k in FIGURES), *[""] * len(jobs)]


QUOTA_HEADER = ["tenant", "flavor", "unit", "guaranteed", "borrow limit", "in use", "borrowed",
                "may start"]  # fmt: skip


def quota(api: Api, args) -> None:
    answer = api.call("GET", "quotas/", params={"tenant": args.tenant} if args.tenant else None)
    rows = [QUOTA_HEADER]
    for team in answer["tenants"]:
        for f in team["flavors"]:
            limit = f["borrow_limit"]
            if limit is None:  # none of its own: the cohort's idle guarantee, or no limit
                limit = "-" if f["guaranteed"] is None else "cohort idle"
            rows.append([team["slug"], f["flavor"], f["unit"], amount(f["guaranteed"]),
                         amount(limit), amount(f["in_use"]), amount(f["borrowed"]),
                         amount(f["may_start"], "no limit")])  # fmt: skip
    table(rows, names=3)
    for team in answer["tenants"]:
        most = team.get("max_queued_jobs")
        at_most = f" of at most {most}" if most is not None else ""
        per_user = team.get("max_gpus_per_user")
        each = ""
        if per_user is not None:
            gpus = "GPU" if per_user == 1 else "GPUs"
            each = f", at most {per_user} {gpus} per user (you hold {amount(team['your_gpus'])})"
        recent = f", {amount(team['recent_gpus'])} GPUs held recently (fair share)"
        show(f"{team['slug']}: {team['queued_jobs']} queued{at_most}, "
             f"{team['waiting_for_quota']} waiting for quota{each}{recent}")  # fmt: skip


CLASS_HEADER = ["class", "value", "preempts", "exempt s", "max runtime s", "open to"]


def classes(api: Api, args) -> None:
    """`classes [--tenant SLUG]`: the priority classes your tenants may submit at."""
    params = {"tenant": args.tenant} if args.tenant else None
    rows = [CLASS_HEADER]
    for rank in api.call("GET", "priority-classes/", params=params)["priority_classes"]:
        most = rank["max_runtime_s"]
        rows.append([rank["name"], str(rank["value"]), "yes" if rank["may_preempt"] else "no",
                     str(rank["preempt_exempt_s"]), "-" if most is None else str(most),
                     ",".join(rank["open_to"]) or "-"])  # fmt: skip
    table(rows, names=1)


CLUSTER_HEADER = ["cluster", "health", "nodes", "idle", "mixed", "allocated", "other",
                  "gpu type", "gpus", "allocated", "idle for you"]  # fmt: skip


def clusters(api: Api, args) -> None:
    """`clusters`: each cluster's nodes by state and its GPUs by type (Slurm's sinfo)."""
    rows = [CLUSTER_HEADER]
    for c in api.call("GET", "clusters/")["clusters"]:
        count, every = c["nodes"], sum(c["nodes"].values())
        taking = [count[state] for state in ("idle", "mixed", "allocated")]
        nodes = [str(every), *map(str, taking), str(every - sum(taking))]
        for kind in c["gpus"] or [None]:
            gpus = ["-"] * 4 if kind is None else [
                kind["gpu_type"], str(kind["total"]), amount(kind["allocated"]),
                str(kind["idle_for_you"])]  # fmt: skip
            rows.append([c["name"], c["health"], *nodes, *gpus])
    table(rows, names=2)


NODE_HEADER = ["cluster", "node", "state", "gpu", "gpus", "cpus", "memory GiB", "window"]


def nodes(api: Api, args) -> None:
    """`nodes [--cluster NAME] [--state S] [--gpu-type T]`: every node, with its state and
    what of it is allocated (Slurm's sinfo -N)."""
    params = {k: v for k, v in (("cluster", args.cluster), ("state", args.state),
                                ("gpu_type", args.gpu_type)) if v}  # fmt: skip
    rows = [NODE_HEADER]
    for n in api.call("GET", "nodes/", params=params)["nodes"]:
        rows.append([n["cluster"], n["name"], n["state"], n["gpu_type"] or "-",
                     f"{amount(n['gpus_allocated'])}/{n['gpus']}",
                     f"{amount(n['cpu_milli_allocated'] / 1000)}/{amount(n['cpu_milli'] / 1000)}",
                     f"{n['memory_mb_allocated'] / 1024:.0f}/{n['memory_mb'] / 1024:.0f}",
                     window_of(n["window"])])  # fmt: skip
    table(rows, names=4, notes=1)


def window_of(window: dict | None) -> str:
    """A node's next window in a few words: its kind (a booking: whether yours), from, to."""
    if window is None:
        return "-"
    kind = window["kind"] + (" (yours)" if window["yours"] else "")
    return f"{kind} {minute(window['starts_at'])} to {minute(window['ends_at'])} UTC"


def minute(time: str) -> str:
    """An ISO 8601 UTC time from the API to the minute: 2026-12-03 10:41."""
    return time[:16].replace("T", " ")


WINDOW_HEADER = ["cluster", "nodes", "from", "to", "status", "reason"]


def maintenance(api: Api, args) -> None:
    windows_table(api.call("GET", "maintenance/")["windows"], "No maintenance planned.")


def bookings(api: Api, args) -> None:
    answer = api.call("GET", "bookings/", params={"tenant": args.tenant} if args.tenant else None)
    windows_table(answer["bookings"], "No bookings.", lead=("tenant",))


def windows_table(windows: list[dict], none: str, lead: tuple[str, ...] = ()) -> None:
    """Node windows (maintenance, bookings) as a table: the `lead` fields, then cluster, nodes
    ("all": every node), from, to, status and reason; `none` when there are none."""
    if not windows:
        show(none)
        return
    rows = [[*(w[name] for name in lead), w["cluster"], ",".join(w["nodes"]) or "all",
             w["starts_at"], w["ends_at"], "in progress" if w["in_progress"] else "upcoming",
             w["reason"]] for w in windows]  # fmt: skip
    header = [*lead, *WINDOW_HEADER]
    table([header, *rows], names=len(header))


def amount(value, none: str = "-") -> str:
    """A quota figure: a whole number as one, a share of GPUs with its decimals."""
    if value is None:
        return none
    if isinstance(value, str):
        return value
    if float(value).is_integer():
        return str(int(value))  # 1310720 MiB, never 1.31072e+06
    return f"{value:.3f}".rstrip("0")  # a share of GPUs: 0.25, 2.125


def label_written(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not (key and equals):
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key, value


def positive(text: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"not a whole number above 0: {text!r}")
    return int(text)


def natural(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(text)


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="mlsched", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    submitting = commands.add_parser("submit")
    submitting.add_argument("file")
    submitting.add_argument(
        "--dependency", "--depends-on", dest="depends_on", action="append", metavar="DEPS",
        help="jobs to wait for: 12,13 (to succeed), afterany:12:13, afternotok:14, singleton",
    )  # fmt: skip
    submitting.add_argument(
        "--begin", type=time_written, metavar="TIME",
        help="not started before TIME: 2026-12-03T02:00:00Z (with its zone), now+2h, now+90m",
    )  # fmt: skip
    submitting.add_argument(
        "--deadline", type=time_written, metavar="TIME",
        help="canceled while queued once it could no longer end by TIME, written as for --begin",
    )  # fmt: skip
    submitting.add_argument(
        "--max-running", type=positive, metavar="N",
        help="a batch: at most N of its shards run at once (Slurm's --array=0-999%%N)",
    )  # fmt: skip
    submitting.add_argument(
        "--label", type=label_written, action="append", metavar="KEY=VALUE",
        help="a label of your own, to find the job by (list --label); again for more",
    )  # fmt: skip
    submitting.add_argument(
        "--test-only", action="store_true",
        help="submit nothing: say whether it would start now, where, or why it would wait "
             "and until when (Slurm's sbatch --test-only)",
    )  # fmt: skip
    depending = commands.add_parser("depend")
    depending.add_argument("id", type=int)
    depending.add_argument("deps", metavar="DEPS", help='as for submit; "" or "none" for none')
    listing = commands.add_parser("list")
    listing.add_argument("--state", choices=STATES, help="only jobs in this state")
    listing.add_argument("--held", action="store_true", help="only held jobs (see hold)")
    listing.add_argument("--batch", type=int, metavar="ID", help="only the shards of this batch")
    listing.add_argument("--limit", type=positive, metavar="N", help="only the newest N jobs")
    listing.add_argument("--label", action="append", metavar="KEY=VALUE",
                         help="only jobs with this label (a KEY alone: with any value); "
                              "again for jobs with all of them")  # fmt: skip
    for name in ("status", "hold", "release"):
        commands.add_parser(name).add_argument("id", type=int)
    requeuing = commands.add_parser("requeue")
    requeuing.add_argument("id", type=int)
    requeuing.add_argument("--hold", action="store_true",
                           help="keep it in the queue once stopped, until released")  # fmt: skip
    resubmitting = commands.add_parser("resubmit")
    resubmitting.add_argument("id", type=int)
    resubmitting.add_argument(
        "--shards", type=shard_choice, metavar="unsucceeded|3,17,512",
        help="a batch's shards alone: those that did not succeed, or these indexes",
    )  # fmt: skip
    reprioritizing = commands.add_parser("priority")
    reprioritizing.add_argument("id", type=int)
    reprioritizing.add_argument("--class", dest="priority_class", metavar="NAME",
                                help="a priority class open to the job's tenant")  # fmt: skip
    reprioritizing.add_argument("--value", type=int, metavar="N",
                                help="its priority within the class, -1000 to 1000")  # fmt: skip
    limiting = commands.add_parser("shard-limit")
    limiting.add_argument("id", type=int)
    limiting.add_argument(
        "limit", type=limit_written, metavar="N|none",
        help="at most N of the batch's shards run at once; none: no limit",
    )  # fmt: skip
    canceling = commands.add_parser("cancel")
    canceling.add_argument("ids", type=int, nargs="*", metavar="ID")
    canceling.add_argument("--name", help="only jobs of this name")
    canceling.add_argument("--state", choices=STATES[:3], help="only jobs in this state")
    canceling.add_argument("--tenant", metavar="SLUG", help="only this tenant's jobs")
    canceling.add_argument("--mine", action="store_true", help="only the jobs you submitted")
    canceling.add_argument("--label", type=label_written, action="append", metavar="KEY=VALUE",
                           help="only jobs carrying this label; again for all of them")  # fmt: skip
    follow = commands.add_parser("logs")
    follow.add_argument("id", type=int)
    follow.add_argument("-f", "--follow", action="store_true")
    follow.add_argument("--shard", type=natural, metavar="N",
                        help="a batch's shard N (0 to shards-1); default: the batch's first "
                             "(shard 0; a rerun of some shards: its lowest)")  # fmt: skip
    report = commands.add_parser("usage")
    report.add_argument("--since", metavar="YYYY-MM-DD", help="first day (default: 30 days ago)")
    report.add_argument("--until", metavar="YYYY-MM-DD", help="day after the last (default: now)")
    report.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")
    quotas = commands.add_parser("quota")
    quotas.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")
    ranks = commands.add_parser("classes")
    ranks.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")
    commands.add_parser("maintenance")
    commands.add_parser("clusters")
    listing_nodes = commands.add_parser("nodes")
    listing_nodes.add_argument("--cluster", metavar="NAME", help="one cluster's nodes")
    listing_nodes.add_argument("--state", help="only nodes in this state (idle, mixed, ...)")
    listing_nodes.add_argument("--gpu-type", metavar="TYPE", help="only nodes of this GPU type")
    booked = commands.add_parser("bookings")
    booked.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")
    args = parser.parse_args(argv)
    token = os.environ.get("MLSCHED_TOKEN", "").strip()
    if not token:
        parser.error("set MLSCHED_TOKEN to your API token")
    # Printable ASCII without spaces, as tokens are: any other character would come back in
    # an error message that quotes the Authorization header, the token with it.
    if not (token.isascii() and token.isprintable() and " " not in token):
        parser.error("MLSCHED_TOKEN holds characters an API token never has: check it")
    url = os.environ.get("MLSCHED_URL", "http://127.0.0.1:8000")
    if not http_address(url):
        parser.error(f"MLSCHED_URL {url!r} is not an http:// or https:// address")
    if not sends_token_safely(url):
        print(f"warning: {url} is plain HTTP: your token travels unencrypted", file=sys.stderr)
    api = Api(url, token)
    run = {"submit": submit, "list": list_jobs, "status": status, "cancel": cancel,
           "hold": hold, "release": hold, "depend": depend, "resubmit": resubmit, "logs": logs,
           "requeue": requeue, "usage": usage, "quota": quota, "priority": priority,
           "shard-limit": shard_limit, "maintenance": maintenance,
           "bookings": bookings, "classes": classes, "clusters": clusters,
           "nodes": nodes}  # fmt: skip
    try:
        run[args.command](api, args)
    except KeyboardInterrupt:
        return 130  # Ctrl-C, e.g. to leave `logs -f`: no traceback
    except BrokenPipeError:
        # The reader went away (`mlsched list | head`): end as a Unix tool killed by SIGPIPE
        # does, quietly. Standard output goes to /dev/null, so the flush at exit cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    return 0


if __name__ == "__main__":
    sys.exit(main())
