"""The commands that print tables: queue, usage, quota, classes, rates, maintenance, bookings,
clusters, nodes, volumes, history and sign-ins."""

import itertools
import json
import sys
from datetime import datetime
from pathlib import Path

from jobs.cli.client import Api, price_written, rate_unit, segment, show
from jobs.cli.commands import clock, shape

USAGE_HEADER = ["tenant", "gpu type", "GPU-h", "CPU core-h", "wasted GPU-h", "preempted",
                "cost", "succeeded", "failed", "canceled", "started", "mean wait s",
                "p95 wait s", "CPU eff", "unused mem GiB-h", "runtime eff",
                "GPU eff"]  # fmt: skip


FIGURES = ["gpu_hours", "cpu_core_hours", "wasted_gpu_hours", "preempted_gpu_hours"]


def usage(api: Api, args) -> None:
    if args.daily:
        daily(api, args)
        return
    params = {name: getattr(args, name) for name in ("since", "until", "tenant", "by_label")}
    splits = [name for name in ("user", "class") if getattr(args, f"by_{name}", False)]
    params |= {f"by_{name}": "1" for name in splits}
    report = api.call("GET", "usage/", params={k: v for k, v in params.items() if v})
    if args.json:
        show(json.dumps(report, indent=2))
        return
    window_said(report)
    table([USAGE_HEADER, *usage_rows(report["tenants"])])
    priced(report)
    if args.by_label:
        show("")
        if report["by_label_incomplete"]:
            show(f"note: by {args.by_label}, read from the jobs kept: those finished before "
                 f"{report['pruned_before']} are not counted")  # fmt: skip
        header = ["tenant", args.by_label, *USAGE_HEADER[2:7]]
        rows = [[t["tenant"], "(none)" if u["value"] is None else u["value"],
                 *(f"{u[k]:.2f}" for k in FIGURES), cost(u)]
                for t in report["tenants"] for u in t["by_label"]]  # fmt: skip
        table([header, *rows])
    for name in splits:
        show("")
        if report[f"by_{name}_incomplete"]:
            show(f"note: by {name}, read from the jobs kept: those finished before "
                 f"{report['pruned_before']} are not counted")  # fmt: skip
        rows = [[t["tenant"], u[name], *(f"{u[k]:.2f}" for k in FIGURES), cost(u)]
                for t in report["tenants"] for u in t[f"by_{name}"]]  # fmt: skip
        table([["tenant", name, *USAGE_HEADER[2:7]], *rows])


def window_said(report: dict) -> None:
    """The lines over a usage report or a daily series: its window, and what retention took."""
    show(f"from {report['since']} to {report['until']}, running attempts counted to "
         f"{report['counted_to']}")  # fmt: skip
    if report["incomplete"]:
        show(f"note: jobs finished before {report['pruned_before']} have been deleted (retention)")


DAILY_HEADER = ["day", "tenant", "gpu type", "GPU-h", "CPU core-h"]


def daily(api: Api, args) -> None:
    """`usage --daily [--json]`: GPU-hours and CPU core-hours per UTC day (`GET
    /api/v1/usage/daily/`), a line per day and tenant (GPU type "all", zeros too), then one for
    each GPU type it used; with --json, the API's answer."""
    params = {name: getattr(args, name) for name in ("since", "until", "tenant")}
    series = api.call("GET", "usage/daily/", params={k: v for k, v in params.items() if v})
    if args.json:
        show(json.dumps(series, indent=2))
        return
    window_said(series)
    rows = [DAILY_HEADER]
    for day in series["days"]:
        for t in day["tenants"]:
            kinds = [("all", t), *((type_name(u["gpu_type"]), u) for u in t["by_gpu_type"])]
            rows += [[day["day"], t["tenant"], kind, f"{u['gpu_hours']:.2f}",
                      f"{u['cpu_core_hours']:.2f}"] for kind, u in kinds]  # fmt: skip
    table(rows, names=3)


def type_name(gpu_type: str | None) -> str:
    """A GPU type as the usage tables write it: "none" for work without GPUs, "unknown" for
    work whose records are gone."""
    if gpu_type is None:
        return "unknown"
    return gpu_type or "none"


def cost(row: dict) -> str:
    """A row's cost, to the cent ("-": a server that prices nothing)."""
    return row.get("cost", "-")


def priced(report: dict) -> None:
    """What the cost column counts: the total in the platform's currency, and the flavors used
    without a rate (nothing from a server that prices nothing)."""
    if "currency" not in report:
        return
    show(f"cost: {report['cost']} {report['currency']} in all, wasted {report['wasted_cost']}, "
         "at the prices in force when used")  # fmt: skip
    if report["unpriced"]:
        show(f"note: no rate for {', '.join(report['unpriced'])}: counted as costing nothing")


QUEUE_HEADER = ["tenant", "owner", "place", "in team", "id", "gpus", "waited", "points",
                "class", "name", "why"]  # fmt: skip


def queue(api: Api, args) -> None:
    """`queue [--tenant SLUG] [--mine] [--limit N]`: your teams' waiting jobs (your own) in the
    order the last cycle left them, with their places and priority points (Slurm's squeue and
    sprio)."""
    params = {"tenant": args.tenant} if args.tenant else {}
    if args.mine:
        params["mine"] = 1
    pages = in_line(api, params)
    first = next(pages)
    if first["as_of"] is None:
        show("no line recorded yet: the scheduler has not run a cycle")
        return
    as_of = datetime.fromisoformat(first["as_of"])
    yours = ", ".join(f"{slug} {n:,}" for slug, n in first["teams"].items())
    show(f"line as of {as_of:%Y-%m-%d %H:%M:%S} UTC: {first['waiting']:,} waiting jobs"
         + (f"; your teams': {yours}" if yours else ""))  # fmt: skip
    for share in first.get("fair_share", {}).values():
        show(share["sentence"])
    rows = [QUEUE_HEADER]
    jobs = itertools.chain(first["jobs"], (job for page in pages for job in page["jobs"]))
    for job in itertools.islice(jobs, args.limit):
        waited = clock(max((as_of - datetime.fromisoformat(job["created"])).total_seconds(), 0))
        rows.append([job["tenant"], job["owner"], str(job["position"]), str(job["in_team"]),
                     str(job["id"]), shape(job), waited, f"{job['points']:.1f}",
                     job["priority_class"], job["name"], job["pending_reason"]])  # fmt: skip
    if len(rows) > 1:
        table(rows, names=2, notes=3)


def in_line(api: Api, params: dict):
    """The queue's pages: a full page's `next` is its last place, to ask for those after."""
    while True:
        page = api.call("GET", "queue/", params=params)
        yield page
        if page["next"] is None:
            return
        params = {**params, "after": page["next"]}


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
        yield [t["tenant"], "all", *(f"{t[k]:.2f}" for k in FIGURES), cost(t), *jobs,
               *sizing(t)]  # fmt: skip
        for u in t["by_gpu_type"]:
            kind = {None: "unknown", "": "none"}.get(u["gpu_type"], u["gpu_type"])
            figures = (f"{u[k]:.2f}" for k in FIGURES)
            yield [t["tenant"], kind, *figures, cost(u), *[""] * len(jobs), *sizing(u)]


def sizing(figures: dict) -> list[str]:
    """The measured work's CPU efficiency and unused memory, the succeeded work's share of its
    runtime limits, and the measured work's GPU efficiency ("-": nothing to tell)."""
    said = {k: "-" if figures[k] is None else f"{figures[k]:.2f}"
            for k in ("cpu_efficiency", "runtime_efficiency", "gpu_efficiency")}  # fmt: skip
    return [said["cpu_efficiency"], f"{figures['memory_gib_hours_unused']:.2f}",
            said["runtime_efficiency"], said["gpu_efficiency"]]  # fmt: skip


QUOTA_HEADER = ["tenant", "flavor", "unit", "guaranteed", "borrow limit", "lend limit", "in use",
                "borrowed", "may start"]  # fmt: skip


def quota(api: Api, args) -> None:
    answer = api.call("GET", "quotas/", params={"tenant": args.tenant} if args.tenant else None)
    rows = [QUOTA_HEADER]
    for team in answer["tenants"]:
        for f in team["flavors"]:
            limit = f["borrow_limit"]
            if limit is None:  # none of its own: the cohort's idle guarantee, or no limit
                limit = "-" if f["guaranteed"] is None else "cohort idle"
            lends = f["lend_limit"]  # None: all of its guarantee, or none to lend
            lends = "-" if f["guaranteed"] is None else "all" if lends is None else lends
            rows.append([team["slug"], f["flavor"], f["unit"], amount(f["guaranteed"]),
                         amount(limit), amount(lends), amount(f["in_use"]), amount(f["borrowed"]),
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
        idle = team.get("gpu_idle_limit_min")
        stops = f", jobs whose GPUs are idle {idle} min are stopped" if idle is not None else ""
        budget = team.get("gpu_hours_per_month")
        spent = (f", {amount(team['gpu_hours_spent'])} of {budget} GPU-hours used this month"
                 if budget is not None else "")  # fmt: skip
        waiting = f"{team['waiting_for_quota']} waiting for quota"
        cost = spend_said(team, answer.get("currency", ""))
        images = team.get("allowed_images")
        only = f", images only {' '.join(images)}" if images else ""
        if team.get("exclusive_allowed") is False:
            only += ", nodes shared (no exclusive jobs)"
        show(f"{team['slug']}: {team['queued_jobs']} queued{at_most}, "
             f"{waiting}{each}{recent}{spent}{cost}{stops}{only}")  # fmt: skip
        if paused := team.get("placements_paused"):
            show(f"  placements paused by a platform admin: {paused}")
        if share := team.get("fair_share"):
            show(f"  {share['sentence']}")
    on = answer.get("fair_share_preemption_classes")
    if on is None and answer.get("fair_share_preemption"):  # a server without per-class ones
        on = ["every class"]
    if on:
        show(f"fair-share preemption is on for jobs of {', '.join(on)}: a team over its fair "
             "share may have preemptible work stopped for a waiting team's")  # fmt: skip


CLASS_HEADER = ["class", "value", "preempts", "fair share", "exempt s", "max runtime s",
                "default runtime s", "gpus per user", "gpus", "held", "yours", "open to",
                "default for"]  # fmt: skip


def spend_said(team: dict, currency: str) -> str:
    """A team's spend alert as `quota` says it: what this month cost of it so far, and what it
    may cost by the month's end; "" without an alert."""
    alert = team.get("spend_alert_per_month")  # None too from a server without alerts
    if alert is None:
        return ""
    said = (
        f", {price_written(team['cost_this_month'], grouped=True)} {currency} of its "
        f"{price_written(alert, grouped=True)} {currency} spend alert spent this month"
    )
    ahead = team.get("cost_forecast_this_month")  # None too from a server without forecasts
    if ahead is not None:
        said += (f", up to {price_written(ahead, grouped=True)} {currency} by the month's end "
                 "if its running jobs run to their limits")  # fmt: skip
    return said


def classes(api: Api, args) -> None:
    """`classes [--tenant SLUG]`: the priority classes your tenants may submit at, their
    limits ("-": none; a server without a limit leaves it out), the GPUs their running work
    holds, everyone's and yours, and which is each one's default (a job submitted without a
    class gets it)."""
    params = {"tenant": args.tenant} if args.tenant else None
    rows = [CLASS_HEADER]
    for rank in api.call("GET", "priority-classes/", params=params)["priority_classes"]:
        fair = {True: "yes", False: "no"}.get(rank.get("fair_share_preemption"), "-")
        limits = ("max_runtime_s", "default_runtime_s", "max_gpus_per_user", "max_gpus")
        rows.append([rank["name"], str(rank["value"]), "yes" if rank["may_preempt"] else "no",
                     fair, str(rank["preempt_exempt_s"]),
                     *("-" if rank.get(name) is None else str(rank[name]) for name in limits),
                     *(f"{rank[name]:g}" if name in rank else "-"
                       for name in ("gpus_held", "your_gpus_held")),
                     ",".join(rank["open_to"]) or "-",
                     ",".join(rank.get("default_for", ())) or "-"])  # fmt: skip
    table(rows, names=1)


RATE_HEADER = ["flavor", "price", "per"]


def rates(api: Api, args) -> None:
    """`rates [--json]`: the platform's rate card in force today (`GET /api/v1/rates/`), what
    the usage reports price an hour of each flavor at, in its currency ("gpu:A100  2.50  USD a
    GPU-hour"), then a line for each change scheduled ("scheduled: gpu:A100 3.00 USD a
    GPU-hour from 2027-01-01"); with --json, the API's answer."""
    card = api.call("GET", "rates/")
    if args.json:
        show(json.dumps(card, indent=2))
        return
    if card["rates"]:
        rows = [[rate["flavor"], price_written(rate["price"]), per(card, rate)]
                for rate in card["rates"]]  # fmt: skip
        table([RATE_HEADER, *rows], names=1, notes=1)
    else:
        show("No prices are set.")
    # A server from before prices had days schedules none.
    for rate in card.get("upcoming", []):
        show(f"scheduled: {rate['flavor']} {price_written(rate['price'])} {per(card, rate)} "
             f"from {rate['since']}")  # fmt: skip


def per(card: dict, rate: dict) -> str:
    """What a rate's price is per: "USD a GPU-hour"."""
    return f"{card['currency']} a {rate_unit(rate['flavor'])}"


CLUSTER_HEADER = ["cluster", "health", "nodes", "idle", "mixed", "allocated", "other",
                  "gpu type", "gpus", "allocated", "idle for you", "cost", "spot"]  # fmt: skip


def clusters(api: Api, args) -> None:
    """`clusters`: each cluster's nodes by state and its GPUs by type (Slurm's sinfo), its
    placement cost and whether its nodes may be taken back at any time (spot: "-" from a
    server that does not say)."""
    rows = [CLUSTER_HEADER]
    for c in api.call("GET", "clusters/")["clusters"]:
        count, every = c["nodes"], sum(c["nodes"].values())
        taking = [count[state] for state in ("idle", "mixed", "allocated")]
        nodes = [str(every), *map(str, taking), str(every - sum(taking))]
        for kind in c["gpus"] or [None]:
            gpus = ["-"] * 4 if kind is None else [
                kind["gpu_type"], str(kind["total"]), amount(kind["allocated"]),
                str(kind["idle_for_you"])]  # fmt: skip
            spot = {True: "yes", False: "no"}.get(c.get("interruptible"), "-")
            rows.append([c["name"], c["health"], *nodes, *gpus, str(c["placement_cost"]), spot])
    table(rows, names=2)


NODE_HEADER = ["cluster", "node", "state", "gpu", "gpus", "cpus", "memory GiB", "features",
               "window", "reason"]  # fmt: skip


def nodes(api: Api, args) -> None:
    """`nodes [--cluster NAME] [--state S] [--gpu-type T]`: every node, with its state, what of
    it is allocated (Slurm's sinfo -N) and why one takes no work (sinfo -R)."""
    params = {k: v for k, v in (("cluster", args.cluster), ("state", args.state),
                                ("gpu_type", args.gpu_type)) if v}  # fmt: skip
    rows = [NODE_HEADER]
    for n in api.call("GET", "nodes/", params=params)["nodes"]:
        rows.append([n["cluster"], n["name"], n["state"], n["gpu_type"] or "-",
                     f"{amount(n['gpus_allocated'])}/{n['gpus']}",
                     f"{amount(n['cpu_milli_allocated'] / 1000)}/{amount(n['cpu_milli'] / 1000)}",
                     f"{n['memory_mb_allocated'] / 1024:.0f}/{n['memory_mb'] / 1024:.0f}",
                     ",".join(n.get("features", ())) or "-", window_of(n["window"]),
                     n.get("reason") or "-"])  # fmt: skip
    table(rows, names=4, notes=3)


def whoami(api: Api, args) -> None:
    """`whoami`: who the token speaks for, their email address, their teams and roles."""
    me = api.call("GET", "me/")
    admin = " (platform admin)" if me["platform_admin"] else ""
    if me.get("tenant_admin"):  # a server of an earlier release does not say
        admin = " (tenant admin)"
    show(f"{me['username']}{admin}, {me['email'] or 'no email address'}")
    for team in me["tenants"]:
        group = team.get("from_group")  # a server of an earlier release does not say
        show(f"  {team['slug']}: {team['role']}" + (f" (from group {group})" if group else ""))
    if token := me["token"]:
        expires = f", expires {token['expires']}" if token["expires"] else ""
        reads = ", read only" if token.get("read_only") else ""
        show(f"token {token['name']!r}{expires}{reads}")


def service_node(api: Api, args) -> None:
    """`cordon|drain CLUSTER NODE [--reason TEXT]`, `uncordon CLUSTER NODE`: a platform admin's
    change of a node's service (Slurm's scontrol update NodeName= State=DRAIN|RESUME), and
    the node's state after it."""
    body = {"reason": args.reason} if getattr(args, "reason", "") else {}
    n = api.call("POST", f"nodes/{segment(args.cluster)}/{segment(args.node)}/{args.command}/",
                 json=body)  # fmt: skip
    done = {"cordon": "cordoned", "drain": "drained", "uncordon": "uncordoned"}[args.command]
    said = done if n["changed"] else f"already {done}"
    if "stopped" in n:
        said += f", {n['stopped']} attempt{'s' if n['stopped'] != 1 else ''} asked to stop"
    show(f"{n['cluster']}/{n['name']}: {said}; now {n['state']}"
         + (f" ({n['reason']})" if n["reason"] else ""))  # fmt: skip


def pause_tenant(api: Api, args) -> None:
    """`pause TENANT --reason TEXT`, `resume TENANT`: a platform admin's pause of a team's
    placements (Kueue's ClusterQueue stopPolicy Hold), and what it leaves queued."""
    body = {"reason": args.reason} if args.command == "pause" else {}
    team = api.call("POST", f"tenants/{segment(args.tenant)}/{args.command}/", json=body)
    done = {"pause": "paused", "resume": "resumed"}[args.command]
    said = done if team["changed"] else f"already {done}"
    why = f" ({team['placements_paused']})" if team["placements_paused"] else ""
    queued = team["queued"]
    show(f"{args.tenant}: placements {said}{why}; {queued} job{'s' if queued != 1 else ''} "
         "queued")  # fmt: skip


def apply_teams(api: Api, args) -> None:
    """`apply-teams FILE [--dry-run]`: a platform admin's teams file (YAML or JSON), sent as
    written for the server to read and apply (`POST /api/v1/tenants/apply/`), and what it
    changed, a line each."""
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except (OSError, UnicodeError) as error:
        raise SystemExit(f"{args.file}: not a readable teams file: {error}") from None
    done = api.call("POST", "tenants/apply/", json={"document": text, "dry_run": args.dry_run})
    said = "dry run: " if done["dry_run"] else ""
    for line in [*done["lines"], done["summary"]]:
        show(said + line)


def export_teams(api: Api, args) -> None:
    """`export-teams [--tenant SLUG ...]`: the teams as a file `apply-teams` takes back
    (`GET /api/v1/tenants/export/`), YAML on standard output, as written."""
    done = api.call("GET", "tenants/export/", params={"tenant": args.tenant or []})
    sys.stdout.write(done["document"])


HISTORY_HEADER = ["time (UTC)", "user", "action", "kind", "object", "what"]


def history(api: Api, args) -> None:
    """`history [--since TIME] [--until TIME] [--user NAME] [--kind KIND] [--limit N]`: a
    platform admin's read of the platform's history (`GET /api/v1/history/`), newest first,
    a change to a line."""
    asked = {"since": args.since, "until": args.until, "user": args.user, "kind": args.kind,
             "limit": args.limit}  # fmt: skip
    answer = api.call("GET", "history/", params={k: v for k, v in asked.items() if v})
    if not answer["entries"]:
        show("No changes.")
        return
    rows = [[minute(e["time"]), e["user"], e["action"], e["kind"] or "-", e["object"],
             e["message"]] for e in answer["entries"]]  # fmt: skip
    table([HISTORY_HEADER, *rows], names=len(HISTORY_HEADER))


SIGN_INS_HEADER = ["time (UTC)", "username", "method", "result", "address", "reason"]


def sign_ins(api: Api, args) -> None:
    """`sign-ins [--since TIME] [--user NAME] [--failed] [--limit N]`: a platform admin's read
    of the sign-ins and the attempts that failed (`GET /api/v1/sign-ins/`), newest first, one
    to a line."""
    asked = {"since": args.since, "user": args.user, "failed": "1" if args.failed else None,
             "limit": args.limit}  # fmt: skip
    answer = api.call("GET", "sign-ins/", params={k: v for k, v in asked.items() if v})
    if not answer["sign_ins"]:
        show("No sign-ins.")
        return
    rows = [[minute(s["at"]), s["username"] or "-", s["method"],
             "ok" if s["succeeded"] else "failed", s["address"] or "-", s["reason"]]
            for s in answer["sign_ins"]]  # fmt: skip
    table([SIGN_INS_HEADER, *rows], names=len(SIGN_INS_HEADER))


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
    windows_table(api.call("GET", "maintenance/")["windows"], "No maintenance planned.",
                  lead=("id",))  # fmt: skip


def window_add(api: Api, args) -> None:
    """`maintenance-add CLUSTER ...`, `booking-add TENANT CLUSTER ...` (`--from TIME --to TIME
    [--nodes N,N] [--reason TEXT]`): a platform admin's window, and how many running jobs it
    will stop at its start."""
    body = {"cluster": args.cluster, "nodes": args.nodes or [], "starts_at": args.starts,
            "ends_at": args.ends, "reason": args.reason}  # fmt: skip
    kind, path = WINDOW_KINDS[args.command]
    if kind == "booking":
        body["tenant"] = args.tenant
    w = api.call("POST", path, json=body)
    on = ",".join(w["nodes"]) or "all nodes"
    of = f" for {w['tenant']}" if kind == "booking" else ""
    show(f"{kind} #{w['id']}{of} of {w['cluster']} ({on}) from {w['starts_at']} to "
         f"{w['ends_at']}: {w['stops']} running job{'s' if w['stops'] != 1 else ''} "
         "stopped at its start")  # fmt: skip


def window_delete(api: Api, args) -> None:
    """`maintenance-delete ID`, `booking-delete ID`: a platform admin takes a window back."""
    kind, path = WINDOW_KINDS[args.command]
    api.call("DELETE", f"{path}{args.id}/")
    show(f"{kind} #{args.id} taken back: its nodes take work again")


# Each window command's kind, and its calls' path.
WINDOW_KINDS = {
    "maintenance-add": ("maintenance", "maintenance/"),
    "maintenance-delete": ("maintenance", "maintenance/"),
    "booking-add": ("booking", "bookings/"),
    "booking-delete": ("booking", "bookings/"),
}


def bookings(api: Api, args) -> None:
    answer = api.call("GET", "bookings/", params={"tenant": args.tenant} if args.tenant else None)
    windows_table(answer["bookings"], "No bookings.", lead=("id", "tenant"))


def windows_table(windows: list[dict], none: str, lead: tuple[str, ...] = ()) -> None:
    """Node windows (maintenance, bookings) as a table: the `lead` fields, then cluster, nodes
    ("all": every node), from, to, status and reason; `none` when there are none."""
    if not windows:
        show(none)
        return
    rows = [[*(str(w[name]) for name in lead), w["cluster"], ",".join(w["nodes"]) or "all",
             w["starts_at"], w["ends_at"], "in progress" if w["in_progress"] else "upcoming",
             w["reason"]] for w in windows]  # fmt: skip
    header = [*lead, *WINDOW_HEADER]
    table([header, *rows], names=len(header))


VOLUME_HEADER = ["tenant", "volume", "access", "clusters", "description"]


def volumes(api: Api, args) -> None:
    """`volumes [--tenant SLUG]`: the data volumes your teams' jobs may mount (submit
    --volume), whether they may write to them, and the clusters that have them."""
    answer = api.call("GET", "volumes/", params={"tenant": args.tenant} if args.tenant else None)
    if not answer["volumes"]:
        show("No volumes.")
        return
    rows = [[v["tenant"], v["name"], "read-write" if v["writable"] else "read only",
             ",".join(v["clusters"]) or "all", v["description"]]
            for v in answer["volumes"]]  # fmt: skip
    table([VOLUME_HEADER, *rows], names=len(VOLUME_HEADER))


def amount(value, none: str = "-") -> str:
    """A quota figure: a whole number as one, a share of GPUs with its decimals."""
    if value is None:
        return none
    if isinstance(value, str):
        return value
    if float(value).is_integer():
        return str(int(value))  # 1310720 MiB, never 1.31072e+06
    return f"{value:.3f}".rstrip("0")  # a share of GPUs: 0.25, 2.125
