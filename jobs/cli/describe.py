"""`status ID` for people: one job as `kubectl describe` and Slurm's `scontrol show job` give
it, a field to a line and its attempts and last moves below, read from the API's answers (a
script gets the job's JSON: `status --json`, or any `status` whose output is not a
terminal)."""

import shlex
from datetime import UTC, datetime

from jobs.cli.client import NOTICES, first_type_wait
from jobs.cli.written import exit_codes_said, slurm_form
from jobs.efficiency import span
from jobs.placement.words import counted, where_on

WIDTH = 17  # the labels' column
COMMAND_SHOWN = 300  # characters of a command shown; --json gives it whole
EVENTS_SHOWN = 10  # the job's last moves listed under its attempts


def asked_for(job: dict) -> str:
    """What each worker asks, and how many: "2 workers of 2 cores, 4096 MiB and 8 GPUs each"
    (an elastic gang adds its fewest workers; a gang kept in one domain, which)."""
    cores = job["cpu_milli"] / 1000
    asked = [f"{cores:g} core{'' if cores == 1 else 's'}", f"{job['memory_mb']} MiB"]
    if job["gpus"]:
        asked.append(counted(job["gpus"], "GPU"))
    elif job["gpu_milli"]:
        asked.append(f"{job['gpu_milli']}m of a GPU")
    per_worker = f"{', '.join(asked[:-1])} and {asked[-1]}"
    workers = f"{job['workers']} workers of {per_worker} each" if job["workers"] > 1 else per_worker
    elastic = f" (elastic: at least {job['min_workers']})" if job.get("min_workers") else ""
    together = f", all in one {job['topology']}" if job.get("topology") else ""
    return f"{workers}{elastic}{together}"


def described(job: dict, events: list[dict], earlier: bool) -> list[str]:
    """The lines `status` prints on a terminal for `job` (the API's job) and its last
    `events` (the API's, oldest first; `earlier`: there are more before them)."""
    lines = [field(label, value) for label, value in fields(job) if value]
    # A batch is read through its first shard: the attempts and moves below are that shard's.
    whose = f"Shard {job['shard_index']}'s " if "shard_states" in job else ""
    attempts = f"{whose}attempts".capitalize()
    lines.append(f"{attempts}:" if job["attempts"] else field(attempts, "none yet"))
    for attempt in job["attempts"]:
        lines.extend(f"  {line}" for line in attempt_lines(attempt, job))
    if events:
        last = f"last {counted(len(events), 'move')}" if earlier else "moves"
        lines.append(f"{whose}{last}:".capitalize())
        lines.extend(f"  {moment(e['time'])}  {moved(e)}" for e in events)
    return lines


def field(label: str, value: str) -> str:
    """One line, `value` under the others' when it runs on to more lines."""
    indent = "\n" + " " * WIDTH
    return f"{label + ':':<{WIDTH - 1}} {indent.join(value.splitlines())}"


def fields(job: dict) -> list[tuple[str, str]]:
    """Each line's label and value, in the order they are read; an empty value is left out."""
    batch = "shard_states" in job
    return [
        ("Job", f"{job['id']} {job['name']}{whose(job)}"),
        ("Team", f"{job['tenant']}, submitted by {job['owner']}"),
        ("Family", job["family"].replace("_", " ")),
        ("State", state(job)),
        ("Why", why(job)),
        ("Estimated start", moment(job["estimated_start"]) if job["estimated_start"] else ""),
        ("In line", in_line(job)),
        ("Asks", f"{asked_for(job)}; runtime limit {span(job['max_runtime_s'])}"),
        ("Shards", shards(job)),
        ("GPU types", gpu_types(job)),
        ("Clusters", ", ".join(f"{k}={v}" for k, v in job["cluster_selector"].items())),
        ("Never on nodes", ", ".join(job.get("exclude_nodes", ()))),
        ("Only on nodes", ", ".join(job.get("only_nodes", ()))),
        ("Only on nodes with", ", ".join(job.get("features", ()))),
        ("Nodes", "to itself, one per worker (exclusive)" if job.get("exclusive") else ""),
        ("Image", job["image"]),
        ("Command", command(job["command"])),
        ("Environment", ", ".join(job["env"])),
        ("Secrets", ", ".join(job["secrets"])),
        ("Volumes", "\n".join(volume(v) for v in job["volumes"])),
        ("Labels", ", ".join(f"{k}={v}" for k, v in job["labels"].items())),
        ("Priority", priority(job)),
        ("Retries", retries(job)),
        ("Notifies", notifies(job)),
        (
            "Emails",
            "its submitter, what its team's webhook is told" if job.get("notify_email") else "",
        ),
        ("Dependencies", dependencies(job)),
        ("Begin", moment(job["begin"]) if job["begin"] else ""),
        ("Deadline", moment(job["deadline"]) if job["deadline"] else ""),
        ("Submitted", moment(job["created"])),
        # A batch's shards start and end each in its turn (`list --batch ID` lists them).
        ("Started", moment(job["started_at"]) if job["started_at"] and not batch else ""),
        ("Ended", moment(job["finished_at"]) if job["finished_at"] and not batch else ""),
    ]


def dependencies(job: dict) -> str:
    if not (job["dependencies"] or job["singleton"]):
        return ""
    return slurm_form(job["dependencies"], job["singleton"])


def whose(job: dict) -> str:
    said = []
    if job["parent"] is not None:
        said.append(f"shard {job['shard_index']} of batch {job['parent']}")
    if job["resubmitted_from"] is not None:
        said.append(f"resubmission of {job['resubmitted_from']}")
    return f" ({'; '.join(said)})" if said else ""


def state(job: dict) -> str:
    """Its state, and why it waits in a word; a batch's, its shards' together (Shards)."""
    said = job["state"]
    if "shard_states" in job or said != "queued":
        return job.get("batch_state", said)
    if job["pending_reason"]:  # "held" once a cycle has seen a held job; Why says by whom
        return f"{said}, waiting as {job['pending_reason']}"
    return f"{said}, held" if job["held"] else said


def why(job: dict) -> str:
    """Why it waits, or why it failed or was canceled (a batch: its first shard's, so said)."""
    said = ""
    if job["state"] == "queued":
        said = job["pending_message"]
    elif job["state"] in ("failed", "canceled"):
        said = job["end_reason"]
    if said and "shard_states" in job:
        return f"shard {job['shard_index']}: {said}"
    return said


def in_line(job: dict) -> str:
    """Where it stands in line and its priority points (a batch: its first shard's, so said)."""
    standing = job.get("standing")
    if not standing:
        return ""
    share = (standing.get("team_share") or {}).get("sentence")
    said = "\n".join(filter(None, (standing["sentence"], standing["points_sentence"], share)))
    return f"shard {job['shard_index']}: {said}" if "shard_states" in job else said


def shards(job: dict) -> str:
    if not (counts := job.get("shard_states")):
        return ""
    said = f"{sum(counts.values())}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
    if job["max_running_shards"] is not None:
        said += f"; at most {job['max_running_shards']} running at once"
    return said


def command(words: list[str]) -> str:
    written = shlex.join(words)
    if len(written) <= COMMAND_SHOWN:
        return written
    rest = len(written) - COMMAND_SHOWN
    return f"{written[:COMMAND_SHOWN]}... ({counted(rest, 'character')} more: status --json)"


def volume(mount: dict) -> str:
    return f"{mount['name']} at {mount['path']}{' (read only)' if mount['read_only'] else ''}"


def priority(job: dict) -> str:
    preemptible = "preemptible" if job["preemptible"] else "not preemptible"
    return f"{job['priority_class']} {job['priority']:+d}, {preemptible}"


def gpu_types(job: dict) -> str:
    """Its GPU types, most preferred first, and how long it waits for the first."""
    waits = first_type_wait(job["gpu_types"], job.get("first_type_wait_s"))
    return ", ".join(job["gpu_types"]) + (f" ({waits})" if waits else "")


def notifies(job: dict) -> str:
    """What its team's webhook is told of it beyond its end: its start, each requeue."""
    told = [said for field, said in NOTICES.items() if job.get(field)]
    return f"{and_joined(told)}, to its team's webhook" if told else ""


def and_joined(items: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 2 else items)


def retries(job: dict) -> str:
    if job["retry_user_errors"]:
        errors = "any failure"
    elif codes := job.get("retry_exit_codes"):
        errors = f"infrastructure failures and exit codes {exit_codes_said(codes)}"
    else:
        errors = "infrastructure failures alone"
    said = f"{job['retries_used']} of {job['max_retries']} used ({errors})"
    if interruptions := job.get("interruptions"):
        said += f"; queued again free as its spot node was taken back: {interruptions}"
    return said


def attempt_lines(attempt: dict, job: dict) -> list[str]:
    """An attempt's head line (its number, how it ended, where) and what it held where."""
    ended = attempt["outcome"] or ("running" if attempt["started_at"] else "starting")
    if attempt["stop_cause"]:
        ended += f" ({attempt['stop_cause']})"
    head = f"#{attempt['number']}  {ended}"
    if attempt["cluster"]:
        head += f" on {attempt['cluster']}"
    if attempt.get("workers", job["workers"]) < job["workers"]:
        head += f" with {attempt['workers']} of {job['workers']} workers"
    if attempt["started_at"]:
        head += f", started {moment(attempt['started_at'])}"
        if attempt["runtime_used"]:
            head += f", ran {attempt['runtime_used']}"
    if attempt["reason"]:
        head += f": {attempt['reason']}"
    elif attempt["exit_code"] is not None:
        head += f": exit code {attempt['exit_code']}"
    where = ", ".join(where_on(node) for node in attempt["nodes"])
    return [head, f"    {where}"] if where else [head]


def moved(event: dict) -> str:
    went = f"{event['from_state'] or 'submitted'} -> {event['to_state']}"
    return f"{went}: {event['reason']}" if event["reason"] else went


def moment(text: str) -> str:
    """An API time (ISO 8601) to the second, in UTC: "2026-12-06 03:19:32 UTC"."""
    try:
        at = datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return text
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")
