"""The job lists' query parameters, read alike by the portal's list and the API's (and so the
CLI's): what each asks of the reader's visible jobs, and what is wrong with them, each error
naming its parameter (a 400).

    state    a state, or several (queued,running)
    reason   why a queued job waits, a code or several (quota_exceeded,user_gpu_limit): the
             queued jobs waiting so, as the last cycle stored it (Slurm's squeue's REASON)
    id       job ids with commas (12,13,14): these jobs alone, at most 100
    held     1 or 0 (true, false)         tenant   a team's slug
    q        a part of the name (at most 200 characters)
    mine     1: the jobs the reader submitted (Slurm's squeue --me)
    label    key=value or key, repeated   before   an id: the jobs before it (paging)
    batch    a batch's id: its shards     shard    with batch: its shard of that index
    since    a time: the jobs not ended before it     until    a time: those submitted before
             it (Slurm's sacct -S and -E: together, the jobs alive at some moment between;
             ISO 8601 with its zone, a day, YYYY-MM-DD, from 00:00 UTC, or now-1d)
    node     a node's name: the jobs that ran there (Slurm's squeue -w, sacct -N), as their
             attempts' allocations record it (kept MLSCHED_LOG_RETENTION_DAYS)

A folded list (the portal's always, the API's with `?fold=1`) lists a batch as its first
shard's row, there when one of its shards is in the state or held asked (jobs/folding.py).
"""

from dataclasses import dataclass, field

from django.db.models import Q
from rest_framework.exceptions import ValidationError

from clusters.models import Allocation, Node
from jobs import folding, reasons
from jobs.fields import Moment
from jobs.models import Job
from jobs.serializers import flag, held_filter, labels_asked, whole_number
from jobs.states import State

# What narrows a list to a part of the reader's jobs: a cancel of every job a list matches
# needs one (a state, a hold, a reason or a time alone would name every live job one may
# cancel, as the API's cancel by filter refuses).
NARROWING = ("id", "tenant", "q", "mine", "label", "batch", "node")
MAX_NAME = 200  # the longest part of a name searched for
MAX_IDS = 100  # the jobs one list may name, a page's worth


@dataclass
class Asked:
    """What a list asks: `rows`, what each row listed must match; `shard`, what a job must
    match, or, folded, one of a batch's shards; its labels; a batch's shards alone, and one
    of them; and the errors, by parameter."""

    rows: Q = field(default_factory=Q)
    shard: Q = field(default_factory=Q)
    labels: list[tuple[str, str | None]] = field(default_factory=list)
    batch: int | None = None
    shard_index: int | None = None
    errors: dict[str, str] = field(default_factory=dict)

    def of(self, jobs, user, *, fold: bool):
        """`jobs` (the reader's visible ones) narrowed as asked; folded unless a batch's shards
        are asked for."""
        if self.batch is not None:
            # Bounded by its last shard: an index range, not a walk back through every job
            # submitted since.
            jobs = jobs.filter(self.rows & self.shard & Job.rows_of_batch(self.batch))
            if self.shard_index is not None:
                jobs = jobs.filter(shard_index=self.shard_index)
        elif fold:
            jobs = jobs.filter(self.rows & folding.rows(user) & folding.any_shard(self.shard))
        else:
            jobs = jobs.filter(self.rows & self.shard)
        return jobs.labelled(self.labels)


def asked(params, user, labels: list[str]) -> Asked:
    """The list's query parameters (`params`, a QueryDict; `labels`, its `label` values as the
    caller takes them) as filters on the jobs of `user`, and what is wrong with them."""
    out = Asked()
    try:
        out.labels = labels_asked(labels)
    except ValueError as bad:
        out.errors["label"] = str(bad)
    if state := params.get("state"):  # one, or several with commas (Slurm's squeue -t PD,R)
        states = list(dict.fromkeys(filter(None, (s.strip() for s in state.split(",")))))
        if states and all(s in State.values for s in states):
            out.shard &= Q(state=states[0]) if len(states) == 1 else Q(state__in=states)
        else:
            out.errors["state"] = f"One of {', '.join(State.values)}, or several with commas."
    if reason := params.get("reason"):
        codes = list(dict.fromkeys(filter(None, (c.strip() for c in reason.split(",")))))
        if codes and all(c in reasons.CODES for c in codes):
            out.shard &= Q(state=State.QUEUED, pending_reason__in=codes)
        else:
            out.errors["reason"] = (
                "A code a queued job waits for (quota_exceeded, insufficient_gpus, held...), "
                "or several with commas."
            )
    if held := params.get("held"):
        try:
            out.shard &= held_filter(held)
        except ValueError as bad:
            out.errors["held"] = str(bad)
    if ids := params.get("id"):  # Slurm's squeue -j 12,13: these jobs alone
        asked_ids = [whole_number(written.strip()) for written in ids.split(",")]
        if None in asked_ids or len(asked_ids) > MAX_IDS:
            out.errors["id"] = f"Job ids with commas, at most {MAX_IDS}."
        else:
            out.rows &= Q(pk__in=asked_ids)
    if node := params.get("node"):
        if not Node.objects.filter(name=node[:253]).exists():
            out.errors["node"] = "No cluster has a node of this name."
        else:  # each shard by its own attempts; through the allocations' index by node
            ran = Allocation.objects.filter(node__name=node).values("attempt__job_id")
            out.shard &= Q(pk__in=ran)
    if tenant := params.get("tenant"):
        out.rows &= Q(tenant__slug=tenant)  # another tenant's slug just finds nothing
    if q := params.get("q", "").strip():
        if len(q) > MAX_NAME:
            out.errors["q"] = f"At most {MAX_NAME} characters."
        else:
            out.rows &= Q(name__icontains=q)
    if yes(params, "mine", out.errors):
        out.rows &= Q(owner=user)
    since, until = (moment(params, name, out.errors) for name in ("since", "until"))
    if since is not None:  # alive at it or after: not ended before it
        out.shard &= Q(finished_at__isnull=True) | Q(finished_at__gte=since)
    if until is not None:
        out.shard &= Q(created__lt=until)
        if since is not None and until <= since:
            out.errors["until"] = "Not after since: no job could be alive between them."
    before = number(params, "before", "An id", out.errors)
    if before is not None:
        out.rows &= Q(id__lt=before)
    out.batch = number(params, "batch", "An id", out.errors)
    out.shard_index = number(params, "shard", "A shard's index", out.errors)
    if out.shard_index is not None and out.batch is None and "batch" not in out.errors:
        # Every job of the reader's tenants would be read for it.
        out.errors["shard"] = "A shard of a batch: give its batch too."
    return out


def narrowed(params) -> bool:
    """Whether the list's parameters narrow it to a part of the reader's jobs (NARROWING;
    `mine` when it says yes)."""
    others = [name for name in NARROWING if name != "mine"]
    return yes(params, "mine", {}) or any(params.get(name, "").strip() for name in others)


def number(params, name: str, what: str, errors: dict[str, str]) -> int | None:
    """A parameter holding an id or another whole number (jobs.serializers.whole_number); None
    when it is not given, or, with an error naming it (`what`: a whole number), not one."""
    if not (raw := params.get(name, "")):
        return None
    if (value := whole_number(raw)) is None:
        errors[name] = f"{what}: a whole number."
    return value


def moment(params, name: str, errors: dict[str, str]):
    """A parameter holding a time (jobs.fields.Moment), as UTC; None when it is not given,
    or, with an error naming it, not a time."""
    if not (raw := params.get(name, "").strip()):
        return None
    try:
        return Moment().run_validation(raw)
    except ValidationError as bad:
        errors[name] = str(bad.detail[0])
        return None


def yes(params, name: str, errors: dict[str, str]) -> bool:
    """A yes-or-no parameter (jobs.serializers.flag; not given, or given empty as a form's
    "any" is: no), or no with an error naming it."""
    if not (raw := params.get(name)):
        return False
    try:
        return flag(raw)
    except ValueError as bad:
        errors[name] = str(bad)
        return False
