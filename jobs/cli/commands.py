"""The commands over one job or a few: submit, list, status, efficiency, spec, cancel, hold,
release, requeue, priority, shard-limit, min-workers, runtime-limit, resize, depend, resubmit
and logs (wait is in waiting.py, status's description for people in describe.py)."""

import functools
import itertools
import json
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

from jobs.cli.client import (
    CONSTRAINTS,
    COUNTED_FROM,
    NOTICES,
    NOTIFY_FLAGS,
    TERMINAL,
    Api,
    ordinal,
    show,
    where,
)
from jobs.cli.describe import EVENTS_SHOWN, asked_for, described
from jobs.cli.describe import retries as retries_said
from jobs.cli.waiting import patiently, wait_for
from jobs.cli.written import (
    NO_LIMIT,
    dependencies_written,
    job_description,
    slurm_form,
    yaml_written,
)
from jobs.efficiency import limit_said
from jobs.placement.words import counted


def submit(api: Api, args) -> None:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        spec = job_description(text)
    except (OSError, ValueError) as error:
        raise SystemExit(f"{args.file}: not a readable job description: {error}") from None
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
    if args.volume:
        if not isinstance(spec, dict) or not isinstance(spec.get("volumes", []), list):
            raise SystemExit(f"{args.file}: not a job description with a list in volumes")
        spec["volumes"] = [*spec.get("volumes", []), *args.volume]
    given = {"begin": args.begin, "deadline": args.deadline, "max_running_shards": args.max_running,
             "min_workers": args.min_workers, "topology": args.topology,
             "exclude_nodes": args.exclude, "only_nodes": args.only_nodes,
             "features": args.constraint,
             "exclusive": True if args.exclusive else None,
             "first_type_wait_s": args.first_type_wait,
             "retry_exit_codes": args.retry_exit_codes,
             **{field: True if getattr(args, field) else None
                for _, field, *_ in NOTIFY_FLAGS}}  # fmt: skip
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
    if isinstance(spec, dict):  # sent again after a 503, it is not submitted twice
        spec.setdefault("idempotency_key", once())
    job = api.call("POST", "jobs/", json=spec)
    show(f"{job['id']} {job['state']}")
    if args.wait:
        raise SystemExit(wait_for(api, [job["id"]], None))


def trial_line(answer: dict) -> str:
    """A test-only submission's answer in a line: where it would start now, or why its first
    job that would not (a batch: which shard) waits, and its estimated start."""
    jobs = answer["jobs"]
    placed = [job for job in jobs if job["status"] == "placed"]
    where = ", ".join(sorted({name for job in placed for name in job["clusters"]}))
    what = f"{len(jobs)} shards" if len(jobs) > 1 else counted(jobs[0]["nodes"], "node")
    if len(jobs) == 1 and jobs[0].get("workers", 1) > 1:
        what = f"{jobs[0]['workers']} workers on {what}"
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


def depend(api: Api, args) -> None:
    """Replace a queued job's dependencies; print them as Slurm writes them."""
    items, singleton = dependencies_written(args.deps)
    body = {"depends_on": items, "singleton": singleton}
    job = api.call("POST", f"jobs/{args.id}/dependencies/", json=body)
    show(f"{job['id']} {slurm_form(job['dependencies'], job['singleton'])}")


def list_jobs(api: Api, args) -> None:
    """The jobs, newest first, a line each; a batch on one line, its state the batch's and its
    shards counted by state after its name, unless its shards are asked for (`--batch`, or
    `--shards` for every batch's)."""
    fold = None if args.batch is not None or args.shards else 1
    params = {"state": args.state, "held": 1 if args.held else None, "batch": args.batch,
              "label": args.label, "fold": fold, "tenant": args.tenant, "q": args.name,
              "mine": 1 if args.mine else None, "id": args.ids, "since": args.since,
              "until": args.until, "node": args.node, "reason": args.reason}  # fmt: skip
    params = {key: value for key, value in params.items() if value is not None}
    if sys.stdout.isatty():  # a header for people; none for a script reading the lines
        show(f"{'ID':>8}  {'STATE':<10} {'FAMILY':<16} {'OWNER':<12} {'GPUS':<7} {'TIME':>10}"
             " NAME")  # fmt: skip
    for job in itertools.islice(all_jobs(api, params), args.limit):
        now = api.now()  # counted to the server's clock as it answered
        waits = [ordinal(job["place"]) + " in line"] if job.get("place") else []
        waits += [job["pending_reason"]] if job["pending_reason"] else []
        why = f"  ({', '.join(waits)})" if waits else ""
        if job["state"] in ("failed", "canceled") and job.get("end_reason"):
            why = f"  ({job['end_reason']})"
        state = job.get("batch_state", job["state"])
        if states := job.get("shard_states"):
            counts = ", ".join(f"{n} {state}" for state, n in states.items())
            waiting = ", ".join(f"{reason or 'undecided'} {n}"
                                for reason, n in job.get("shards_waiting", {}).items())  # fmt: skip
            why = f"  [{sum(states.values())} shards: {counts}" + (
                f"; queued as {waiting}]" if waiting else "]"
            )
        show(f"{job['id']:>8}  {state:<10} {job['family']:<16} {job['owner']:<12} "
             f"{shape(job):<7} {time_in(job, now):>10} {job['name']}{why}")  # fmt: skip


def time_in(job: dict, now: datetime) -> str:
    """squeue's TIME, one word: how long a live job has run (a queued one, waited since it
    was submitted; a scheduled one, since it was placed), and how long an ended one ran ("-"
    if it never did); D-HH:MM:SS. The portal's list says the same (views.time_in_state)."""
    since = job.get(COUNTED_FROM.get(job["state"], "started_at"))
    until = None if job["state"] in COUNTED_FROM else job.get("finished_at")
    if since is None:
        return "-"
    end = now if until is None else datetime.fromisoformat(until)
    return clock(max((end - datetime.fromisoformat(since)).total_seconds(), 0))


def clock(seconds: float) -> str:
    """Seconds as Slurm writes a job's time: M:SS, H:MM:SS, D-HH:MM:SS."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def shape(job: dict) -> str:
    """The GPUs a job asks and, for a gang kept in one topology domain, which: "4x8@rack" (all
    in one rack); "!" after them for a job whose workers each take a node to itself, "2x8!"
    (exclusive); a CPU-only job kept in one domain or exclusive gives its workers instead,
    "4w@rack", "2w!". One word, so that the columns before the name stay one word each."""
    exclusive, topology = job.get("exclusive"), job.get("topology")
    if not (exclusive or topology):
        return gpus_asked(job)
    asked = gpus_asked(job) if job["gpus"] or job["gpu_milli"] else f"{workers(job)}w"
    return f"{asked}{'!' if exclusive else ''}{'@' + topology if topology else ''}"


def gpus_asked(job: dict) -> str:
    """The GPUs a job asks, as the portal's list says them: workers x GPUs each ("4x8"; an
    elastic gang's fewest first, "2-4x8"), a share in thousandths ("250m"), or "none"."""
    each = str(job["gpus"]) if job["gpus"] else f"{job['gpu_milli']}m" if job["gpu_milli"] else ""
    if not each:
        return "none"
    return f"{workers(job)}x{each}" if job["workers"] > 1 else each


def workers(job: dict) -> str:
    """A job's workers: "4", or an elastic gang's fewest first, "2-4"."""
    least = f"{job['min_workers']}-" if job.get("min_workers") else ""
    return f"{least}{job['workers']}"


def all_jobs(api: Api, params: dict):
    """The listing page after page: a full page's `next` is its last id, to ask for those before."""
    while True:
        page = api.call("GET", "jobs/", params=params)
        yield from page["jobs"]
        if page["next"] is None:
            return
        params = {**params, "before": page["next"]}


def status(api: Api, args) -> None:
    """The job described for a person on a terminal, with its last moves; its JSON for a
    script (output not a terminal, or --json)."""
    job = api.call("GET", f"jobs/{args.id}/")
    if args.json or not sys.stdout.isatty():
        show(json.dumps(job, indent=2))
        return
    moves = api.call("GET", f"jobs/{args.id}/events/", params={"last": EVENTS_SHOWN})
    for line in described(job, moves["events"], moves["earlier"]):
        show(line)


def spec(api: Api, args) -> None:
    """The job as a submission of it is written, to keep or to change and submit (submit FILE
    takes it as it is): JSON, or YAML with --yaml."""
    written = api.call("GET", f"jobs/{args.id}/spec/")
    if args.yaml:
        show(yaml_written(written).rstrip("\n"))
    else:
        show(json.dumps(written, indent=2, ensure_ascii=False))


def efficiency(api: Api, args) -> None:
    """What each attempt of a job used of what it asked for, as Slurm's seff says it."""
    job = api.call("GET", f"jobs/{args.id}/")
    show(f"job {job['id']} {job['name']} ({job['state']}): asked for {asked_for(job)}")
    for a in job["attempts"]:
        where = f" on {a['cluster']}" if a["cluster"] else ""
        if a.get("workers", job["workers"]) < job["workers"]:  # an elastic gang started smaller
            where += f", started with {a['workers']} of {job['workers']} workers"
        ran = f"ran {a['runtime_used']}" if a["runtime_used"] else "not started"
        used = (f"{ran}, CPU {a['cpu_used'] or 'not measured'}, "
                f"memory peak {a['memory_used'] or 'not measured'}")  # fmt: skip
        if a["gpu_used"]:
            used += f", {a['gpu_used']}"
        show(f"attempt {a['number']} ({a['outcome'] or 'live'}){where}: {used}")
    if not job["attempts"]:
        show("not placed yet")
    if job["state"] in ("failed", "canceled") and job.get("end_reason"):
        show(f"{job['state']}: {job['end_reason']}")


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


def label(api: Api, args) -> None:
    """`label ID KEY=VALUE ... [--remove KEY ...]`: the job's labels after the change."""
    change = {"labels": dict(args.labels), "remove": args.remove or []}
    answer = api.call("POST", f"jobs/{args.id}/labels/",
                      json={k: v for k, v in change.items() if v})  # fmt: skip
    written = ", ".join(f"{k}={v}" for k, v in answer["labels"].items()) or "none"
    changed = answer["changed"]
    show(f"labels {written} on {changed} job{'s' if changed != 1 else ''}")


def notify(api: Api, args) -> None:
    """`notify ID [--start | --no-start] [--requeue | --no-requeue] [--time-limit |
    --no-time-limit] [--email | --no-email]`: what the job is told of now."""
    fields = [field for _, field, *_ in NOTIFY_FLAGS]
    asked = {name: getattr(args, name) for name in fields if getattr(args, name) is not None}
    answer = api.call("POST", f"jobs/{args.id}/notifications/", json=asked)
    told = [said for name, said in NOTICES.items() if answer[name]]
    by = " and by email to its submitter" if answer["notify_email"] else ""
    changed = answer["changed"]
    show(f"its team's webhook is told of its end{''.join(', ' + t for t in told)}{by} "
         f"({changed} job{'s' if changed != 1 else ''})")  # fmt: skip


def retries(api: Api, args) -> None:
    """`retries ID [--max N] [--exit-codes CODES | --no-exit-codes] [--user-errors |
    --no-user-errors]`: what the job retries now, as status says it."""
    asked = {"max_retries": args.max_retries, "retry_user_errors": args.retry_user_errors,
             "retry_exit_codes": [] if args.no_exit_codes else args.retry_exit_codes}  # fmt: skip
    body = {name: value for name, value in asked.items() if value is not None}
    answer = api.call("POST", f"jobs/{args.id}/retries/", json=body)
    changed = answer["changed"]
    show(f"retries: {retries_said(answer)} ({changed} job{'s' if changed != 1 else ''})")


def priority(api: Api, args) -> None:
    """How many jobs now have the priority asked (a batch: its queued shards)."""
    asked = {"priority_class": args.priority_class, "priority": args.value}
    answer = api.call("POST", f"jobs/{args.id}/priority/",
                      json={k: v for k, v in asked.items() if v is not None})  # fmt: skip
    changed = answer["changed"]
    show(f"priority {answer['priority_class']} {answer['priority']:+d} for {changed} "
         f"job{'s' if changed != 1 else ''}")  # fmt: skip


def shard_limit(api: Api, args) -> None:
    """How many of the batch's shards may now run at once, and how many shard rows changed."""
    body = {"max_running_shards": None if args.limit == NO_LIMIT else args.limit}
    answer = api.call("POST", f"jobs/{args.id}/shard-limit/", json=body)
    limit, changed = answer["max_running_shards"], answer["changed"]
    said = f"at most {limit} of its shards" if limit is not None else "no limit on its shards"
    show(f"batch {answer['id']}: {said} running at once ({changed} shards)")


def min_workers(api: Api, args) -> None:
    """The fewest workers the queued training job may now start with, of all its workers."""
    body = {"min_workers": None if args.limit == NO_LIMIT else args.limit}
    answer = api.call("POST", f"jobs/{args.id}/min-workers/", json=body)
    least, workers = answer["min_workers"], answer["workers"]
    said = f"at least {least} of its {workers}" if least else f"all {workers} of its"
    show(f"job {answer['id']}: starts with {said} workers{'' if least else ' together'}")


def runtime_limit(api: Api, args) -> None:
    """The job's runtime limit now, and how many jobs changed (a batch's shards)."""
    answer = api.call("POST", f"jobs/{args.id}/runtime-limit/",
                      json={"max_runtime_s": args.seconds})  # fmt: skip
    changed = answer["changed"]
    show(f"runtime limit {limit_said(answer['max_runtime_s'])} for "
         f"{changed} job{'s' if changed != 1 else ''}")  # fmt: skip


def resize(api: Api, args) -> None:
    """`resize ID [--cpu-milli N] [--memory-mb N] [--gpus N] [--gpu-milli N]`: what each worker
    of the queued job asks for now, and how many jobs changed (a batch's queued shards)."""
    asked = {name: getattr(args, name) for name in ("cpu_milli", "memory_mb", "gpus", "gpu_milli")}
    answer = api.call("POST", f"jobs/{args.id}/request/",
                      json={k: v for k, v in asked.items() if v is not None})  # fmt: skip
    changed = answer["changed"]
    each = asked_for({**answer, "workers": 1, "min_workers": None, "topology": ""})
    show(f"each worker asks for {each} ({changed} job{'s' if changed != 1 else ''})")


def constrain(api: Api, args) -> None:
    """`constrain ID [--gpu-types T,T | --any-gpu-type] [--cluster-selector KEY=VALUE ... |
    --any-cluster] [--exclude NODE,NODE | --no-exclude] [--only-nodes NODE,NODE | --any-node]
    [--constraint F&F | --no-constraint] [--first-type-wait DURATION | --no-first-type-wait]
    [--exclusive | --shared]`: where the queued job may run now, and how many jobs changed (a
    batch's queued shards). An older server's answer, without only_nodes, still prints."""
    body: dict = {}
    if args.gpu_types is not None or args.any_gpu_type:
        body["gpu_types"] = [] if args.any_gpu_type else args.gpu_types
    if args.selector or args.any_cluster:
        body["cluster_selector"] = {} if args.any_cluster else dict(args.selector)
    if args.exclude is not None or args.no_exclude:
        body["exclude_nodes"] = [] if args.no_exclude else args.exclude
    if args.only_nodes is not None or args.any_node:
        body["only_nodes"] = [] if args.any_node else args.only_nodes
    if args.constraint is not None or args.no_constraint:
        body["features"] = [] if args.no_constraint else args.constraint
    if args.first_type_wait is not None or args.no_first_type_wait:
        body["first_type_wait_s"] = None if args.no_first_type_wait else args.first_type_wait
    if args.exclusive is not None:
        body["exclusive"] = args.exclusive
    answer = api.call("POST", f"jobs/{args.id}/constraints/", json=body)
    changed = answer["changed"]
    said = where(*(answer.get(name) for name in CONSTRAINTS))
    show(f"may run on {said} "
         f"({changed} job{'s' if changed != 1 else ''})")  # fmt: skip


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


def once() -> str:
    """An idempotency key of its own for a submission or a resubmission: sent again (after a
    503 whose commit may have been lost), it makes its jobs once."""
    return f"cli-{uuid.uuid4()}"


def resubmit(api: Api, args) -> None:
    body = {"idempotency_key": once()} | ({} if args.shards is None else {"shards": args.shards})
    job = api.call("POST", f"jobs/{args.id}/resubmit/", json=body)
    show(f"{job['id']} {job['state']}")


def logs(api: Api, args) -> None:
    """Print the job's log (a batch's: one shard's); with --follow, until the job has ended.
    Its state is read after a page with nothing new, so the log is read once more once it has
    ended: the lines it wrote just before it ended are shown."""
    job_id = log_source(api, args.id, getattr(args, "shard", None))
    after, ended = 0, not args.follow
    scope = {name: value for name in ("worker", "attempt", "grep")
             if (value := getattr(args, name, None)) not in (None, "")}  # fmt: skip
    # Followed, a log outlives a restart of the web app; read once, an error ends it.
    read = functools.partial(patiently, api) if args.follow else api.call
    # --tail N: its last N lines first (kubectl logs --tail), then on from there if followed.
    tail = {"last": args.tail} if getattr(args, "tail", None) else {}
    while True:
        page = read("GET", f"jobs/{job_id}/logs/", params={"after": after, **scope, **tail})
        if tail and page.get("earlier"):
            show(f"(the last {args.tail} lines: earlier ones left out)", sys.stderr)
        for line in page["lines"]:
            out = sys.stderr if line["stream"] == "stderr" else sys.stdout
            show(f"[{line['attempt']}.{line['worker']}] {line['text']}", out)
        after = page["next"]
        if tail:  # the tail read once: the rest of the log, if followed, comes after it
            tail = {}
            if not args.follow:
                return
            continue
        if page["lines"]:
            continue
        if ended:
            return
        ended = read("GET", f"jobs/{job_id}/")["state"] in TERMINAL
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
