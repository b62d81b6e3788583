"""The command line read and run: `python -m jobs.cli COMMAND ...` (jobs/cli/__init__.py says
what each command does)."""

import argparse
import os
import re
import sys
from typing import NoReturn

import jobs.cli
from jobs.cli.client import NOTIFY_FLAGS, STATES, Api, server_url, shortened
from jobs.cli.commands import (
    cancel,
    constrain,
    depend,
    efficiency,
    hold,
    label,
    list_jobs,
    logs,
    min_workers,
    notify,
    priority,
    requeue,
    resize,
    resubmit,
    retries,
    runtime_limit,
    shard_limit,
    spec,
    status,
    submit,
)
from jobs.cli.logins import login, logout, token_for, token_like, token_name
from jobs.cli.members import member_add, member_remove, member_set, members
from jobs.cli.secrets import secret_delete, secret_set, secrets
from jobs.cli.tables import (
    apply_teams,
    bookings,
    classes,
    clusters,
    export_teams,
    history,
    maintenance,
    nodes,
    pause_tenant,
    queue,
    quota,
    rates,
    service_node,
    sign_ins,
    usage,
    volumes,
    whoami,
    window_add,
    window_delete,
)
from jobs.cli.waiting import TIMED_OUT, wait
from jobs.cli.written import (
    duration_written,
    exit_codes_written,
    features_written,
    http_address,
    label_written,
    limit_written,
    names_written,
    natural,
    path_name,
    positive,
    sends_token_safely,
    shard_choice,
    states_written,
    tail_written,
    time_written,
    volume_option,
)

# A team member's roles, as the server names them (quotas.Membership.Role).
ROLES = ("owner", "member", "viewer")


class Parser(argparse.ArgumentParser):
    """argparse's, its errors cut short: they quote what they were given, which may be text
    of any length."""

    def error(self, message: str) -> NoReturn:
        super().error(shortened(message))


def build_parser() -> argparse.ArgumentParser:
    """Every command and its options, in the order `mlsched --help` and its errors name them."""
    parser = Parser(
        prog="mlsched",
        description=jobs.cli.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_submitting(commands)
    add_checking(commands)
    add_holding(commands)
    add_changing(commands)
    add_reading(commands)
    add_secrets(commands)
    add_signing_in(commands)
    return parser


def add_submitting(commands) -> None:
    """submit, and depend, which writes a queued job's dependencies as submit does."""
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
        "--min-workers", type=positive, metavar="N",
        help="elastic training: when all its workers do not fit, start with as many as fit, "
             "at least N (torchrun's --nnodes=N:MAX)",
    )  # fmt: skip
    submitting.add_argument(
        "--topology", metavar="KEY",
        help="training: all of its gang's nodes share one value of this node topology label "
             "(rack, nvlink, zone), as Slurm's --switches keeps a job under one switch",
    )  # fmt: skip
    submitting.add_argument(
        "--exclude", type=names_written, metavar="NODE[,NODE...]",
        help="never run on these nodes (Slurm's --exclude; nodes lists them)",
    )  # fmt: skip
    submitting.add_argument(
        "--only-nodes", type=names_written, metavar="NODE[,NODE...]",
        help="run on these nodes alone (its only_nodes; any cluster's node of that name; nodes "
             "lists them)",
    )  # fmt: skip
    submitting.add_argument(
        "--first-type-wait", type=duration_written, metavar="DURATION",
        help="take only the first of its gpu_types for this long from when it may run (90m, "
             "2h), then any of them (its first_type_wait_s)",
    )  # fmt: skip
    submitting.add_argument(
        "--constraint", type=features_written, metavar="FEATURE[&FEATURE...]",
        help="run only on nodes that offer all these features (its features; Slurm's "
             "--constraint=ib&nvme; nodes lists what each offers)",
    )  # fmt: skip
    submitting.add_argument(
        "--exclusive", action="store_true",
        help="each worker takes a node of exactly its GPUs to itself, every GPU of it, and no "
             "other job runs there while it does (its exclusive; Slurm's --exclusive)",
    )  # fmt: skip
    submitting.add_argument(
        "--retry-exit-codes", type=exit_codes_written, metavar="CODE[,CODE...]",
        help="retry these exits of its own code within its retries, as infrastructure "
             "failures are (1 to 255, a run as 128-255; killed by signal N: 128+N)",
    )  # fmt: skip
    submitting.add_argument(
        "--label", type=label_written, action="append", metavar="KEY=VALUE",
        help="a label of your own, to find the job by (list --label); again for more",
    )  # fmt: skip
    submitting.add_argument(
        "--volume", type=volume_option, action="append", metavar="NAME:PATH[:rw]",
        help="mount your team's data volume NAME at PATH, read only unless :rw (see volumes); "
             "again for more",
    )  # fmt: skip
    for flag, field, said, slurm in NOTIFY_FLAGS:
        submitting.add_argument(f"--notify-{flag}", dest=field, action="store_true",
                                help=f"{said} (its {field}; Slurm's {slurm})")  # fmt: skip
    submitting.add_argument(
        "--wait", action="store_true",
        help="then wait until it has ended, and exit as it did (see wait; Slurm's sbatch --wait)",
    )  # fmt: skip
    submitting.add_argument(
        "--test-only", action="store_true",
        help="submit nothing: say whether it would start now, where, or why it would wait "
             "and until when (Slurm's sbatch --test-only)",
    )  # fmt: skip
    depending = commands.add_parser("depend")
    depending.add_argument("id", type=int)
    depending.add_argument("deps", metavar="DEPS", help='as for submit; "" or "none" for none')


def add_checking(commands) -> None:
    """list, status, efficiency, queue, spec and wait: how your jobs stand."""
    listing = commands.add_parser("list")
    listing.add_argument("--state", type=states_written, metavar="S[,S...]",
                         help="only jobs in this state, or in any of these: queued,running "
                              f"({', '.join(STATES)})")  # fmt: skip
    listing.add_argument("--reason", metavar="CODE[,CODE...]",
                         help="only queued jobs waiting for this reason, or any of these "
                              "(quota_exceeded,user_gpu_limit; Slurm's squeue REASON)")  # fmt: skip
    listing.add_argument("--id", dest="ids", metavar="ID[,ID...]",
                         help="only these jobs (at most 100; Slurm's squeue -j)")  # fmt: skip
    listing.add_argument("--held", action="store_true", help="only held jobs (see hold)")
    listing.add_argument("--batch", type=int, metavar="ID",
                         help="only the shards of this batch, a line each")  # fmt: skip
    listing.add_argument("--shards", action="store_true",
                         help="every batch's shards a line each (else a batch is one line, its "
                              "shards counted by state)")  # fmt: skip
    listing.add_argument("--limit", type=positive, metavar="N", help="only the newest N jobs")
    listing.add_argument("--tenant", metavar="SLUG", help="only this team's jobs")
    listing.add_argument("--name", metavar="TEXT",
                         help="only jobs whose name holds TEXT, in any case")  # fmt: skip
    listing.add_argument("--mine", action="store_true",
                         help="only the jobs you submitted (Slurm's squeue --me)")  # fmt: skip
    listing.add_argument("--label", action="append", metavar="KEY=VALUE",
                         help="only jobs with this label (a KEY alone: with any value); "
                              "again for jobs with all of them")  # fmt: skip
    listing.add_argument("--node", metavar="NAME",
                         help="only jobs that ran on this node (Slurm's squeue -w)")  # fmt: skip
    for option, meaning in (
        ("--since", "only jobs not ended before TIME (Slurm's sacct -S)"),
        ("--until", "only jobs submitted before TIME (Slurm's sacct -E)"),
    ):
        listing.add_argument(option, type=time_written, metavar="TIME",
                             help=f"{meaning}: now-N with s, m, h or d (now-1d), a day "
                                  "(2026-12-05, from 00:00 UTC) or an ISO 8601 time with its "
                                  "zone")  # fmt: skip
    showing = commands.add_parser("status")
    showing.add_argument("id", type=int)
    showing.add_argument("--json", action="store_true",
                         help="the job as the API gives it, as JSON (what status writes "
                              "when its output is not a terminal)")  # fmt: skip
    commands.add_parser("efficiency").add_argument("id", type=int)
    lining = commands.add_parser("queue")
    lining.add_argument("--tenant", metavar="SLUG", help="only this team's waiting jobs")
    lining.add_argument("--limit", type=positive, metavar="N", help="only the first N in line")
    lining.add_argument("--mine", action="store_true", help="only the jobs you submitted")
    speccing = commands.add_parser("spec")
    speccing.add_argument("id", type=int)
    speccing.add_argument("--yaml", action="store_true", help="write it as YAML, not JSON")
    waiting = commands.add_parser("wait")
    waiting.add_argument("ids", type=int, nargs="+", metavar="ID")
    waiting.add_argument("--timeout", type=positive, metavar="SECONDS",
                         help=f"give up after this long, exiting {TIMED_OUT}")  # fmt: skip


def add_holding(commands) -> None:
    """hold, release, requeue and resubmit: keeping a job from running, or running it again."""
    for name in ("hold", "release"):
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


def add_changing(commands) -> None:
    """label, notify, priority, shard-limit, min-workers, runtime-limit, resize and cancel: changing
    jobs already submitted."""
    labelling = commands.add_parser("label")
    labelling.add_argument("id", type=int)
    labelling.add_argument("labels", type=label_written, nargs="*", metavar="KEY=VALUE",
                           help="labels to set (a value replaces the one its key had)")  # fmt: skip
    labelling.add_argument("--remove", action="append", metavar="KEY",
                           help="a label to remove; again for more")  # fmt: skip
    telling = commands.add_parser("notify")
    telling.add_argument("id", type=int)
    for flag, field, said, _ in NOTIFY_FLAGS:  # each with --no- to turn it off
        telling.add_argument(f"--{flag}", dest=field, action=argparse.BooleanOptionalAction,
                             help=said)  # fmt: skip
    retrying = commands.add_parser("retries")
    retrying.add_argument("id", type=int)
    retrying.add_argument("--max", dest="max_retries", type=int, metavar="N",
                          help="the most retries it may use, 0 to 20")  # fmt: skip
    codes = retrying.add_mutually_exclusive_group()
    codes.add_argument("--exit-codes", dest="retry_exit_codes", type=exit_codes_written,
                       metavar="CODE[,CODE...]",
                       help="retry these exits of its own code (replaces its codes)")  # fmt: skip
    codes.add_argument("--no-exit-codes", action="store_true", help="retry no exit code")
    retrying.add_argument("--user-errors", dest="retry_user_errors",
                          action=argparse.BooleanOptionalAction,
                          help="retry every failure of its own code")  # fmt: skip
    reprioritizing = commands.add_parser("priority")
    reprioritizing.add_argument("id", type=int)
    reprioritizing.add_argument("--class", dest="priority_class", metavar="NAME",
                                help="a priority class open to the job's tenant")  # fmt: skip
    reprioritizing.add_argument("--value", type=int, metavar="N",
                                help="its priority within the class, -1000 to 1000")  # fmt: skip
    for name, meaning in (
        ("shard-limit", "at most N of the batch's shards run at once; none: no limit"),
        ("min-workers", "the fewest of its workers a queued training job may start with; "
                        "none: all of them together"),
    ):  # fmt: skip
        limiting = commands.add_parser(name)
        limiting.add_argument("id", type=int)
        limiting.add_argument("limit", type=limit_written, metavar="N|none", help=meaning)
    runtime = commands.add_parser("runtime-limit")
    runtime.add_argument("id", type=int)
    runtime.add_argument("seconds", type=duration_written, metavar="DURATION",
                         help="seconds, or N with m, h or d: 90m, 12h, 2d")  # fmt: skip
    resizing = commands.add_parser("resize")
    resizing.add_argument("id", type=int)
    for option, meaning in (
        ("--cpu-milli", "millicores each worker asks for"),
        ("--memory-mb", "MiB of memory each worker asks for"),
        ("--gpus", "whole GPUs each worker asks for (0 with --gpu-milli)"),
        ("--gpu-milli", "a share of one GPU, in thousandths (0 with --gpus)"),
    ):
        resizing.add_argument(option, type=natural, metavar="N", help=meaning)
    constraining = commands.add_parser("constrain")
    constraining.add_argument("id", type=int)
    types = constraining.add_mutually_exclusive_group()
    types.add_argument("--gpu-types", type=names_written, metavar="T[,T...]",
                       help="the GPU types it takes, most preferred first")  # fmt: skip
    types.add_argument("--any-gpu-type", action="store_true", help="any GPU type")
    clusters = constraining.add_mutually_exclusive_group()
    clusters.add_argument("--cluster-selector", dest="selector", type=label_written,
                          action="append", metavar="KEY=VALUE",
                          help="only clusters with this label; again for more")  # fmt: skip
    clusters.add_argument("--any-cluster", action="store_true", help="any cluster")
    off = constraining.add_mutually_exclusive_group()
    off.add_argument("--exclude", type=names_written, metavar="NODE[,NODE...]",
                     help="never run on these nodes (replaces those it excluded)")  # fmt: skip
    off.add_argument("--no-exclude", action="store_true", help="exclude no node")
    alone = constraining.add_mutually_exclusive_group()
    alone.add_argument("--only-nodes", type=names_written, metavar="NODE[,NODE...]",
                       help="run on these nodes alone (replaces those it named)")  # fmt: skip
    alone.add_argument("--any-node", action="store_true", help="run on any node")
    needs = constraining.add_mutually_exclusive_group()
    needs.add_argument("--constraint", type=features_written, metavar="FEATURE[&FEATURE...]",
                       help="only on nodes offering all these features (replaces those "
                            "it required)")  # fmt: skip
    needs.add_argument("--no-constraint", action="store_true", help="require no feature")
    first = constraining.add_mutually_exclusive_group()
    first.add_argument("--first-type-wait", type=duration_written, metavar="DURATION",
                       help="take only the first of its GPU types for this long from when it "
                            "may run (90m, 2h), then any of them")  # fmt: skip
    first.add_argument("--no-first-type-wait", action="store_true",
                       help="take any of its GPU types at once")  # fmt: skip
    whole = constraining.add_mutually_exclusive_group()
    whole.add_argument("--exclusive", action="store_true", default=None,
                       help="each worker takes a node of exactly its GPUs to itself")  # fmt: skip
    whole.add_argument("--shared", dest="exclusive", action="store_false",
                       help="its workers share nodes with other jobs")  # fmt: skip
    canceling = commands.add_parser("cancel")
    canceling.add_argument("ids", type=int, nargs="*", metavar="ID")
    canceling.add_argument("--name", help="only jobs of this name")
    canceling.add_argument("--state", choices=STATES[:3], help="only jobs in this state")
    canceling.add_argument("--tenant", metavar="SLUG", help="only this tenant's jobs")
    canceling.add_argument("--mine", action="store_true", help="only the jobs you submitted")
    canceling.add_argument("--label", type=label_written, action="append", metavar="KEY=VALUE",
                           help="only jobs carrying this label; again for all of them")  # fmt: skip


def add_reading(commands) -> None:
    """logs, usage, quota, classes, rates, maintenance, clusters, nodes, bookings and volumes:
    read only."""
    follow = commands.add_parser("logs")
    follow.add_argument("id", type=int)
    follow.add_argument("-f", "--follow", action="store_true")
    follow.add_argument("--shard", type=natural, metavar="N",
                        help="a batch's shard N (0 to shards-1); default: the batch's first "
                             "(shard 0; a rerun of some shards: its lowest)")  # fmt: skip
    follow.add_argument("--tail", type=tail_written, metavar="N",
                        help="only its last N lines (1 to 5000), then on from there with -f "
                             "(kubectl logs --tail)")  # fmt: skip
    follow.add_argument(
        "--worker",
        type=natural,
        metavar="RANK",
        help="only the lines of the worker of that rank (0 to workers-1)",
    )
    follow.add_argument(
        "--attempt",
        type=natural,
        metavar="N",
        help="only the lines of its attempt N (status lists them)",
    )
    follow.add_argument(
        "--grep", metavar="TEXT", help="only the lines holding TEXT, in any case (at most 200)"
    )
    report = commands.add_parser("usage")
    report.add_argument("--since", metavar="YYYY-MM-DD", help="first day (default: 30 days ago)")
    report.add_argument("--until", metavar="YYYY-MM-DD", help="day after the last (default: now)")
    report.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")
    report.add_argument(
        "--by-label", metavar="KEY", help="also each tenant's usage by its jobs' values of KEY"
    )
    report.add_argument(
        "--by-user", action="store_true",
        help="also each tenant's usage by the users who submitted its jobs (sreport user top)",
    )  # fmt: skip
    report.add_argument(
        "--by-class", action="store_true",
        help="also each tenant's usage by the priority classes its jobs ran at",
    )  # fmt: skip
    report.add_argument(
        "--daily", action="store_true",
        help="GPU-hours and CPU core-hours per UTC day instead: a line per day and tenant",
    )  # fmt: skip
    report.add_argument("--json", action="store_true", help="the API's answer, as JSON")
    quotas = commands.add_parser("quota")
    quotas.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")
    ranks = commands.add_parser("classes")
    ranks.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")
    card = commands.add_parser("rates")
    card.add_argument("--json", action="store_true",
                      help="the rate card as the API gives it, as JSON")  # fmt: skip
    commands.add_parser("maintenance")
    commands.add_parser("whoami", help="who your token speaks for: email, teams and roles")
    for kind in ("maintenance", "booking"):
        planning = commands.add_parser(f"{kind}-add", help=f"platform admins: plan a {kind}")
        if kind == "booking":
            planning.add_argument("tenant", help="the tenant it is for (its slug)")
        planning.add_argument("cluster")
        planning.add_argument("--from", dest="starts", required=True, metavar="TIME",
                              help="its start, ISO 8601 with its zone, or now+2h")  # fmt: skip
        planning.add_argument("--to", dest="ends", required=True, metavar="TIME",
                              help="its end, written as --from is")  # fmt: skip
        planning.add_argument("--nodes", type=names_written, metavar="NODE[,NODE...]",
                              help="its nodes (default: every node of the cluster)")  # fmt: skip
        planning.add_argument("--reason", default="", help="why, shown to users")
        taking_back = commands.add_parser(f"{kind}-delete",
                                          help=f"platform admins: take a {kind} back")  # fmt: skip
        taking_back.add_argument("id", type=int)
    commands.add_parser("clusters")
    listing_nodes = commands.add_parser("nodes")
    listing_nodes.add_argument("--cluster", metavar="NAME", help="one cluster's nodes")
    listing_nodes.add_argument("--state", help="only nodes in this state (idle, mixed, ...)")
    listing_nodes.add_argument("--gpu-type", metavar="TYPE", help="only nodes of this GPU type")
    for verb, does in (("cordon", "place nothing new on a node (what runs goes on)"),
                       ("drain", "cordon a node and stop its work, requeued (a grace first)"),
                       ("uncordon", "place work on a node again")):  # fmt: skip
        servicing = commands.add_parser(verb, help=f"platform admins: {does}")
        servicing.add_argument("cluster", type=path_name)
        servicing.add_argument("node", type=path_name)
        if verb != "uncordon":
            servicing.add_argument("--reason", default="", help="why, shown beside its state")
    pausing = commands.add_parser("pause", help="platform admins: start none of a team's jobs")
    pausing.add_argument("tenant", type=path_name, help="the team (its slug)")
    pausing.add_argument("--reason", required=True, help="why, shown to the team")
    resuming = commands.add_parser("resume", help="platform admins: place a team's jobs again")
    resuming.add_argument("tenant", type=path_name, help="the team (its slug)")
    applying = commands.add_parser(
        "apply-teams", help="platform admins: make the teams, quotas and classes a file declares"
    )
    applying.add_argument("file", help="the teams file, YAML or JSON ('-': standard input)")
    applying.add_argument("--dry-run", action="store_true", help="say what would change only")
    exporting = commands.add_parser(
        "export-teams", help="platform admins: the teams, quotas and classes as a file to apply"
    )
    exporting.add_argument("--tenant", action="append", metavar="SLUG",
                           help="only this team (several: one --tenant each)")  # fmt: skip
    changes = commands.add_parser("history")
    changes.add_argument("--since", metavar="TIME", help="changes from TIME, as --begin takes it")
    changes.add_argument("--until", metavar="TIME", help="changes before TIME")
    changes.add_argument("--user", metavar="NAME", help="one user's changes")
    changes.add_argument("--kind", metavar="KIND", help="changes of one kind of object (node)")
    changes.add_argument("--limit", type=positive, metavar="N", help="at most N (default 100)")
    signing = commands.add_parser("sign-ins")
    signing.add_argument("--since", metavar="TIME", help="sign-ins from TIME, as --begin takes it")
    signing.add_argument("--user", metavar="NAME", help="those naming one username")
    signing.add_argument("--failed", action="store_true", help="the failed ones alone")
    signing.add_argument("--limit", type=positive, metavar="N", help="at most N (default 100)")
    commands.add_parser("members").add_argument("tenant", type=path_name, metavar="TENANT")
    adding = commands.add_parser("member-add", help="a team's owners: add a user to it")
    adding.add_argument("tenant", type=path_name, metavar="TENANT")
    adding.add_argument("user", metavar="USER")
    adding.add_argument("--role", choices=ROLES, default="member", help="member by default")
    setting_role = commands.add_parser("member-set", help="a team's owners: change a role")
    setting_role.add_argument("tenant", type=path_name, metavar="TENANT")
    setting_role.add_argument("user", type=path_name, metavar="USER")
    setting_role.add_argument("role", choices=ROLES)
    removing = commands.add_parser("member-remove", help="a team's owners: remove a member")
    removing.add_argument("tenant", type=path_name, metavar="TENANT")
    removing.add_argument("user", type=path_name, metavar="USER")
    booked = commands.add_parser("bookings")
    booked.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")
    mountable = commands.add_parser("volumes")
    mountable.add_argument("--tenant", metavar="SLUG", help="one of your tenants (default: all)")


def add_secrets(commands) -> None:
    """secrets, secret-set and secret-delete: a tenant's secrets."""
    commands.add_parser("secrets").add_argument("tenant", type=path_name, metavar="TENANT")
    setting = commands.add_parser("secret-set")
    setting.add_argument("tenant", type=path_name, metavar="TENANT")
    setting.add_argument("name", type=path_name, metavar="NAME")
    setting.add_argument(
        "--from-file", metavar="PATH", help="read the value from PATH (default: standard input)"
    )
    setting.add_argument(
        "--registry",
        metavar="HOST",
        help="a registry credential: the team's images there are pulled with "
        "it, the value its password or token",
    )
    setting.add_argument("--username", metavar="USER",
                         help="the user a registry credential signs in as")  # fmt: skip
    setting.add_argument(
        "--as-file",
        action="store_true",
        help="a secret jobs get as a file, the variable NAME holding its path (a service "
        "account's key, a kubeconfig); on a registry credential, it replaces the credential",
    )
    setting.add_argument(
        "--variable",
        action="store_true",
        help="set NAME as an environment variable even if it is a registry credential or a "
        "file now (without it, that is refused: it would be replaced by a variable)",
    )
    deleting = commands.add_parser("secret-delete")
    deleting.add_argument("tenant", type=path_name, metavar="TENANT")
    deleting.add_argument("name", type=path_name, metavar="NAME")


def add_signing_in(commands) -> None:
    """login and logout: a token got through the browser, kept, or forgotten."""
    logging_in = commands.add_parser(
        "login", help="sign in through the browser; keep the token got for MLSCHED_URL"
    )
    logging_in.add_argument("--browser", action="store_true",
                            help="open the page to approve it in your browser too")  # fmt: skip
    logging_in.add_argument("--name", type=token_name, metavar="NAME",
                            help="the token's name on the API tokens page (default: "
                            "'mlsched CLI on <host>')")  # fmt: skip
    commands.add_parser("logout", help="forget the token `login` kept for MLSCHED_URL")


def signing_in(command: str, url: str, args) -> int:
    """`login` or `logout`, which need no token."""
    if not sends_token_safely(url):
        print(f"warning: {url} is plain HTTP: your token travels unencrypted", file=sys.stderr)
    try:
        cut_short(login if command == "login" else logout, url, args)
    except KeyboardInterrupt:
        return 130  # Ctrl-C while `login` waits for its approval
    return 0


# What Python makes of bytes UTF-8 does not decode in its command line (PEP 383).
SURROGATES = re.compile("[\ud800-\udfff]")

# The arguments naming a file of this machine, read and not sent: a path may be any bytes.
LOCAL_PATHS = {"file", "from_file"}


def refuse_text_not_utf8(parser: argparse.ArgumentParser, args) -> None:
    """Exit 2 naming an argument whose text, to be sent to the server, is not UTF-8: bytes a
    shell passed that UTF-8 does not decode (Python reads them as lone surrogates), which no
    request can carry."""
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = verbs.choices[args.command]
    for action in command._actions:
        text = not_utf8(getattr(args, action.dest, None))
        if action.dest not in LOCAL_PATHS and text is not None:
            name = "/".join(action.option_strings) or action.metavar or action.dest
            command.error(f"argument {name}: not UTF-8 text: {text!r}")


def not_utf8(value: object) -> str | None:
    """The first text in a value as parsed (text, or lists, pairs and mappings of it) that is
    not UTF-8; None if all of it is."""
    if isinstance(value, str):
        return value if SURROGATES.search(value) else None
    if isinstance(value, dict):
        value = list(value.items())
    if isinstance(value, list | tuple):
        return next(filter(None, map(not_utf8, value)), None)
    return None


def cut_short(command, *args) -> None:
    """Run a command, the message it exits with cut short (see shortened)."""
    try:
        command(*args)
    except SystemExit as exit:
        if isinstance(exit.code, str):
            raise SystemExit(shortened(exit.code)) from None
        raise


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    refuse_text_not_utf8(parser, args)
    if args.command == "submit" and args.wait and args.test_only:
        parser.error("--wait waits for a job: --test-only submits none")
    if args.command == "usage" and args.daily and (args.by_label or args.by_user or args.by_class):
        parser.error("--daily gives the use per day: without --by-label, --by-user or --by-class")
    url = server_url()
    if not http_address(url):
        parser.error(f"MLSCHED_URL {url!r} is not an http:// or https:// address")
    if args.command in ("login", "logout"):  # before any token: they get or forget one
        return signing_in(args.command, url, args)
    token, source = token_for(url)
    if not token:
        parser.error("set MLSCHED_TOKEN to your API token, or run `mlsched login`")
    if not token_like(token):
        parser.error(f"{source} holds characters an API token never has: check it")
    if not sends_token_safely(url):
        print(f"warning: {url} is plain HTTP: your token travels unencrypted", file=sys.stderr)
    api = Api(url, token, source)
    run = {"submit": submit, "list": list_jobs, "status": status, "efficiency": efficiency,
           "queue": queue, "wait": wait, "spec": spec, "cancel": cancel,
           "hold": hold, "release": hold, "depend": depend, "resubmit": resubmit, "logs": logs,
           "requeue": requeue, "label": label, "notify": notify, "usage": usage, "quota": quota,
           "rates": rates,
           "priority": priority, "retries": retries,
           "shard-limit": shard_limit, "min-workers": min_workers,
           "runtime-limit": runtime_limit, "resize": resize, "constrain": constrain,
           "maintenance": maintenance,
           "bookings": bookings, "classes": classes, "clusters": clusters,
           "nodes": nodes, "cordon": service_node, "drain": service_node,
           "uncordon": service_node, "pause": pause_tenant, "resume": pause_tenant,
           "apply-teams": apply_teams, "export-teams": export_teams, "history": history,
           "members": members,
           "member-add": member_add, "member-set": member_set, "member-remove": member_remove,
           "sign-ins": sign_ins,
           "whoami": whoami, "maintenance-add": window_add,
           "maintenance-delete": window_delete, "booking-add": window_add,
           "booking-delete": window_delete, "volumes": volumes, "secrets": secrets,
           "secret-set": secret_set, "secret-delete": secret_delete}  # fmt: skip
    try:
        cut_short(run[args.command], api, args)
    except KeyboardInterrupt:
        return 130  # Ctrl-C, e.g. to leave `logs -f`: no traceback
    except BrokenPipeError:
        # The reader went away (`mlsched list | head`): end as a Unix tool killed by SIGPIPE
        # does, quietly. Standard output goes to /dev/null, so the flush at exit cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    return 0
