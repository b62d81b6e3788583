"""The web portal's pages: the job list, a job's page, the submit form and the user's API
tokens. What the job page's forms post (cancel, hold, requeue, resubmit, the changes of a job)
is jobs/action_views.py's."""

import secrets
import shlex
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Q, Window
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from rest_framework.exceptions import ValidationError

from clusters import maintenance
from clusters.models import Node, is_topology_key
from jobs import (
    access,
    actions,
    dependencies,
    efficiency,
    folding,
    listing,
    queue_api,
    reasons,
    standing,
    throttles,
    trial,
)
from jobs import forms as submit_form
from jobs.access import visible_jobs
from jobs.cli.client import CONSTRAINTS, COUNTED_FROM, NOTICES, first_type_wait
from jobs.cli.commands import shape
from jobs.cli.describe import and_joined
from jobs.cli.written import exit_codes_said
from jobs.fields import MAX_LABELS, MAX_RUNTIME
from jobs.forms import described
from jobs.models import Family, Job
from jobs.serializers import (
    FLAGS,
    REQUEST,
    SubmitSerializer,
    mail_problem,
    spec_as_read,
    whole_number,
)
from jobs.states import TERMINAL, State, batch_state
from quotas import tokens
from quotas.models import PriorityClass, TenantVolume

PAGE = 50
HISTORY = 20  # events the job page lists, newest first
SHARD_LIMIT = "max_running_shards"  # a batch's limit, on the submit form and the job page
# The submit form's fields that have a help text, and its element's id.
SUBMIT_HELPS = {"begin": "begin-help", "deadline": "deadline-help",
                SHARD_LIMIT: "max-running-shards-help",
                "min_workers": "min-workers-help", "topology": "topology-help",
                "secrets": "secrets-help", "volumes": "volumes-help",
                "exclude_nodes": "exclude-nodes-help", "only_nodes": "only-nodes-help",
                "features": "features-help", "exclusive": "exclusive-help",
                "first_type_wait_s": "first-type-wait-help",
                "command": "command-help", "notify_start": "notify-start-help",
                "notify_requeue": "notify-requeue-help",
                "notify_time_limit": "notify-time-limit-help",
                "notify_email": "notify-email-help",
                "retry_exit_codes": "retry-exit-codes-help"}  # fmt: skip


def index(request):
    """The user's jobs, newest first, PAGE at a time (``?before=<id>`` pages on), narrowed as
    the API's list is (jobs/listing.py: state, held, tenant, q, mine, label, since, until,
    batch, shard),
    each batch folded into one row unless its shards are asked for (``?batch=<id>``). What is
    wrong with them is a 400 naming it; a team the user is not in just lists nothing."""
    asked = listing.asked(request.GET, request.user, labels_written(request))
    errors = asked.errors
    jobs = visible_jobs(request.user).select_related("tenant", "priority_class", "owner")
    jobs = jobs.with_end_reason().with_started_workers()
    if errors:
        jobs = jobs.none()
    else:
        jobs = asked.of(jobs, request.user, fold=True).prefetch_related("dependency_links")
    page = list(jobs.order_by("-id")[:PAGE])  # newest first, by the primary key's index
    if not request.GET.get("batch"):
        count_shards(page)
    mine = access.tenant_ids(request.user)
    hidden = access.hidden_from(request.user, page, mine)
    now = timezone.now()
    places = standing.places([job for job in page if not job.is_batch], mine)
    for job in page:
        job.place = standing.ordinal(places[job.pk]) if job.pk in places else ""
        # Why it waits, or why it ended (a batch's row: why its shards wait, or nothing).
        ended = job.state in (State.FAILED, State.CANCELED)
        job.why = access.end_reason(job, mine) if ended else access.wait_sentence(job, hidden)
        if not job.is_batch:
            job.for_what, job.for_how_long = time_in_state(job, now)
    # The rows the user may cancel, hold or release, ticked for the list's actions: live ones.
    live = [job.pk for job in page if getattr(job, "listed_state", job.state) not in TERMINAL]
    mayed = access.cancelable_jobs(request.user).filter(pk__in=live) if live else Job.objects.none()
    ticks = set(mayed.values_list("pk", flat=True))
    for job in page:
        job.selectable = job.pk in ticks
    shown = ("state", "held", "tenant", "mine", "q", "since", "until", "batch", "reason")
    values = {k: request.GET.get(k, "") for k in shown}
    written = labels_written(request)
    kept = [*((k, v) for k, v in values.items() if v), *(("label", text) for text in written)]
    context = {
        "jobs": page,
        "next": page[-1].pk if len(page) == PAGE else None,
        "values": values,
        # Those asked, then room for one more.
        "labels": written,
        "more_labels": len(written) < MAX_LABELS,
        "filters": urlencode(kept),  # for the paging links, and a label's to narrow further
        "narrowed": not errors and listing.narrowed(request.GET),  # cancel all it matches
        "paged": "before" in request.GET,
        "errors": errors,
        "fields": described(errors),
        "held": FLAGS.get(values["held"].lower()),  # the held select's choice: True, False, None
        "mine": FLAGS.get(values["mine"].lower()),  # the box is ticked for a yes
        "states": State.values,
        # Jobs that have not ended, as one choice (the list takes states with commas).
        "live_states": ",".join(s for s in State.values if s not in TERMINAL),
        "tenants": access.tenants_of(request.user).order_by("name"),
        # Whether the list's actions on the rows ticked are drawn, and where they come back to.
        "selectable": bool(ticks),
        "here": request.get_full_path(),
    }
    return render(request, "portal/index.html", context, status=400 if errors else 200)


@login_required
def queue(request):
    """The user's teams' waiting jobs in line, as GET /api/v1/queue/ gives them (`tenant`,
    `mine`, `after`, `limit`; what is wrong with them is a 400 naming it)."""
    query = queue_api.asked(request.GET)
    found = queue_api.in_line(request.user, query) if not query.errors else None
    line = found.line if found else None
    rows = []
    for entry, job in found.jobs if found else ():
        listed = queue_api.job_json(entry, job, found.slugs)
        waited = max((line.at - job.created).total_seconds(), 0) if line else 0
        rows.append({**listed, "gpus": shape(listed), "waited": efficiency.span(waited),
                     "why": job.pending_message})  # fmt: skip
    context = {
        "line": line,
        "teams": sorted((found.slugs[t], n) for t, n in line.teams.items()) if line else (),
        "slugs": found.slugs if found else {},
        "fair_shares": queue_api.fair_shares(found).values() if found else (),
        "rows": rows,
        "next": line.jobs[-1].position if line and line.more else None,
        "tenant": query.tenant,
        "mine": query.mine,
        "tenants": access.tenants_of(request.user).order_by("name"),
        "errors": query.errors,
        "fields": described(query.errors),
    }
    return render(request, "portal/queue.html", context, status=400 if query.errors else 200)


def time_in_state(job: Job, now) -> tuple[str, str]:
    """How long a live job has been where it is (the CLI's TIME column): a queued one since
    its submission, a placed one since its start (or its placement, before it starts)."""
    field = COUNTED_FROM.get(job.state)
    if field is None or (since := getattr(job, field)) is None:
        return "", ""
    return SINCE_SAID[field], efficiency.span(max((now - since).total_seconds(), 0))


SINCE_SAID = {"created": "Waited since its submission", "scheduled_at": "Since it was placed",
              "started_at": "Run since it started"}  # fmt: skip


def count_shards(page: list[Job]) -> None:
    """Each batch of the folded list's page with its shards counted by state, its state the
    batch's (states.batch_state), and why its queued shards wait."""
    by_pk = {job.pk: job for job in page}
    for pk, shards in folding.shards_of(page).items():
        job = by_pk[pk]
        job.shard_counts, job.shard_rows = shards.states, sum(shards.states.values())
        job.listed_state = batch_state(shards.states)
        job.shards_waiting = [(reason, n, reasons.meaning(reason))
                              for reason, n in shards.waiting.items()]  # fmt: skip


def labels_written(request) -> list[str]:
    """The job list's ``?label=`` values as typed, each once, empty ones left out."""
    return list(dict.fromkeys(text for text in request.GET.getlist("label") if text))


@login_required
def job_detail(request, pk):
    return job_page(request, get_object_or_404(page_jobs(request.user), pk=pk))


def page_jobs(user):
    return visible_jobs(user).select_related("tenant", "priority_class", "owner")


def job_page(
    request, job, error: str = "", status: int = 200, typed: str | None = None, invalid=()
):
    """The job's page; after a refused action, with why (and a refused change of dependencies
    with what was `typed`), the fields of its forms at fault marked `invalid`."""
    attempts = list(
        job.attempts.select_related("cluster")
        .prefetch_related("allocations__node")
        .order_by("number")
    )
    now = timezone.now()
    for attempt in attempts:
        attempt.efficiency = efficiency.of_attempt(attempt, job, now)
        attempt.started_with = started_with(attempt.workers, job.workers)
    shard_states = job.shard_states() if job.is_batch else {job.state: 1}
    # A batch can be canceled while any of its shards lives, whatever became of the first.
    live = any(state not in TERMINAL for state in shard_states)
    can_resubmit = job.parent_id is None and access.can_resubmit(request.user, job)
    can_cancel = live and access.can_cancel(request.user, job)
    # Who may cancel may hold a queued job (a batch: its queued shards) and release it.
    queued = can_cancel and State.QUEUED in shard_states
    depends_on = dependency_list(request.user, job)
    # Only a reader from outside the job's tenant (a grant on this job alone) may be hidden from.
    outsider = access.is_outsider(request.user, job)
    hidden = access.hidden_from(request.user, [job]) if outsider else frozenset()
    history = list(job.events.order_by("-time", "-id")[: HISTORY + 1])
    if outsider:
        for event in history:
            event.reason = access.outsiders_reason(event.reason)
    eligible = job.eligible_since(now)
    context = {
        "job": job,
        # Said only when it is not the submission, and never of a time to come (a backoff).
        "eligible_since": eligible if eligible != job.created else None,
        # Why it waits, or why it ended (a batch is headed with its own state: not its first
        # shard's end).
        "wait_sentence": access.wait_sentence(job, hidden)
        or ("" if job.is_batch else access.end_reason(job, access.tenant_ids(request.user))),
        # The job it runs again, unless the reader may not see that one.
        "resubmitted_from": None if job.resubmitted_from_id in hidden else job.resubmitted_from_id,
        "resubmissions": resubmissions(request.user, job),
        # The maintenance window or another team's booking that will stop it, if one will.
        "window_ahead": maintenance.ahead_of_job(job) if live else None,
        # Where it stands in line, as the job document's `standing` says it.
        "standing": standing.read_by(request.user, job),
        "attempts": attempts,
        # An elastic gang's attempts say the workers each started with (a column of its own).
        "elastic": job.min_workers is not None or any(a.workers != job.workers for a in attempts),
        # The log shown for one worker (by rank) or one attempt, chosen above it.
        "ranks": range(job.workers) if job.workers > 1 else (),
        "history": history[:HISTORY],
        "more_history": len(history) > HISTORY,
        "can_cancel": can_cancel,
        "hold": actions.hold_verb(job, admin=request.user.is_superuser) if queued else "",
        # Drawn for whoever may cancel the job while it lives: job.js shows it while queued.
        "priority_classes": open_classes(job) if can_cancel else None,
        "queued": queued,
        "max_runtime_s": int(MAX_RUNTIME.total_seconds()),  # the runtime limit form's largest
        # Who may cancel may requeue a scheduled or running job (job.js shows it then).
        "requeue": can_cancel and bool({State.SCHEDULED, State.RUNNING} & set(shard_states)),
        # A batch's limit on its shards running at once, on its first shard's page, changed
        # by whoever may cancel it while it lives.
        "change_shard_limit": can_cancel and job.is_batch,
        # A training gang's fewest workers, changed while it is queued by whoever may cancel
        # it (drawn while it lives: job.js shows it while queued).
        "change_min_workers": can_cancel and job.family == Family.TRAINING,
        # Labels are changed in any state by whoever may cancel the job (a batch: its first
        # shard's page).
        "change_labels": job.parent_id is None and access.can_cancel(request.user, job),
        # What it is told of, changed while it lives by whoever may cancel it (a batch: its
        # first shard's page).
        "change_notifications": can_cancel and job.parent_id is None,
        "first_type_wait": first_type_wait(job.gpu_types, job.first_type_wait_s),
        "mail_problem": mail_problem(job.owner, "Its submitter's") if can_cancel else "",
        # Drawn hidden while the job lives: job.js shows it once the job has ended.
        "can_resubmit": can_resubmit,
        # One key per page drawn: a double click resubmits once.
        "resubmit_key": f"resubmit-{job.pk}-{secrets.token_hex(8)}",
        "rerun": rerun_form(job, shard_states) if can_resubmit and not live else None,
        "live": live,
        "shard_states": shard_states if job.is_batch else None,
        # A shard's batch, linked where the reader may see it (a shard shared alone: not).
        "batch_visible": job.parent_id is not None
        and visible_jobs(request.user).filter(pk=job.parent_id).exists(),
        "command_line": command_line(job.command),
        # In the unit the attempts' time used is read in, and in the seconds it was given in.
        "runtime_limit": efficiency.limit_said(job.max_runtime_s),
        # What its team's webhook is told of it beyond its end.
        "notifies": notifies(job),
        # The exit codes it retries on, a run of them as the form takes it (128-255).
        "retry_exit_codes": exit_codes_said(job.retry_exit_codes),
        # A batch is headed with its own state, not its first shard's.
        "heading_state": batch_state(shard_states) if job.is_batch else job.state,
        "shard_count": shard_count(job, sum(shard_states.values())),
        "dependencies": depends_on,
        "change_dependencies": dependencies_form(
            request.user, job, depends_on, can_cancel, shard_states, typed
        ),
        "dependents": waiting_for(request.user, job),
        "error": error,
        # The page's one message (#error) describes the fields it is about.
        "fields": described(
            dict.fromkeys(invalid, error),
            message_id="error",
            helps={
                "dependencies": "dependencies-help",
                SHARD_LIMIT: "shard-limit-help",
                "min_workers": "min-workers-help",
                "max_runtime_s": "runtime-limit-help",
                **dict.fromkeys(("max_retries", "retry_exit_codes"), "retries-help"),
                **dict.fromkeys(REQUEST, "request-help"),
                **dict.fromkeys(CONSTRAINTS, "constraints-help"),
            },
        ),
    }
    return render(request, "portal/job.html", context, status=status)


def notifies(job: Job) -> str:
    """What its team's webhook is told of it beyond its end, as its page says it ("": only
    that); the page says apart whether its submitter is emailed (`notify_email`)."""
    told = [
        said + (" (its first shard's)" if name == "notify_start" and job.is_batch else "")
        for name, said in NOTICES.items()
        if getattr(job, name)
    ]
    return and_joined(told)


def started_with(workers: int, whole: int) -> str:
    """The workers an attempt started with, against its job's (as job.js says it): an elastic
    gang may start with fewer than all."""
    if workers == whole:
        return f"all {whole}"
    return f"started with {workers} of {whole} workers"


def command_line(command) -> str:
    """The command as a shell would take it back, quoting kept: `bash -c 'echo hi; sleep 20'`
    (joined by spaces it read as three commands)."""
    if not isinstance(command, list):
        return str(command)
    return shlex.join(str(arg) for arg in command)


def rerun_form(job: Job, shard_states: dict[str, int]) -> dict | None:
    """The form rerunning an ended batch's shards that did not succeed (failed, canceled): how
    many, and a key of its own per page drawn. None for a job that is no batch, a batch whose
    every shard succeeded, or one some of whose shards that did not succeed run again already
    (a rerun of them would be refused: its page, under "Run again as", says where)."""
    count = sum(n for state, n in shard_states.items() if state != State.SUCCEEDED)
    if not job.is_batch or not count:
        return None
    unsucceeded = job.batch().exclude(state=State.SUCCEEDED).values("shard_index")
    if Job.objects.filter(resubmitted_from=job, shard_index__in=unsucceeded).live().exists():
        return None
    return {"count": count, "key": f"rerun-{job.pk}-{secrets.token_hex(8)}"}


RESUBMISSIONS_SHOWN = 10


def resubmissions(user, job: Job) -> list[int]:
    """The jobs (a batch: its first shard) running this one again that the user may see, the
    latest RESUBMISSIONS_SHOWN, oldest first."""
    again = access.visible_jobs(user).filter(resubmitted_from=job, parent__isnull=True)
    return sorted(again.order_by("-pk").values_list("pk", flat=True)[:RESUBMISSIONS_SHOWN])


def shard_count(job: Job, rows: int) -> str:
    """How many shards a batch has, as its page says it: "4", or "2 of 5" for a rerun of some
    of a batch's shards (each keeps its index among the 5)."""
    return str(rows) if rows == job.shards else f"{rows} of {job.shards}"


def open_classes(job: Job) -> list[PriorityClass]:
    """The priority classes the job may move to: those open to its tenant, highest first."""
    classes = PriorityClass.objects.prefetch_related("tenants").order_by("-value")
    return [c for c in classes if c.open_to(job.tenant)]


def dependencies_form(user, job, depends_on, can_cancel, shard_states, typed) -> dict | None:
    """The form changing the job's dependencies, for whoever may cancel it (the API's rule)
    while it lives, on a batch's first shard's page: its `text`, as typed or as the job has
    them (`depends_on`, those the user can see), drawn `hidden` unless every shard is queued
    (job.js shows it while they are). None where it has no form."""
    if not can_cancel or job.parent_id is not None:
        return None
    if not access.sees_dependencies(user, job):
        return None  # a change would drop the jobs it waits for that the user cannot see
    if typed is None:
        waits = [dependencies.Wait(d.pk, d.kind) for d in depends_on]
        typed = dependencies.written(waits, job.singleton)
    return {"text": typed, "hidden": set(shard_states) != {State.QUEUED}}


def dependency_list(user, job: Job) -> list[Job]:
    """The jobs `job` waits for (a shard: its batch's) that the user can see, by id, each with
    the dependency's `kind`; a batch with its shards counted by state (`counts`)."""
    links = visible_jobs(user).filter(dependent_links__job_id=job.parent_id or job.pk)
    found = list(links.annotate(kind=F("dependent_links__kind")).order_by("pk"))
    batches = [d.pk for d in found if d.is_batch]
    counts: dict[int, dict[str, int]] = {}
    if batches:  # every batch's shards counted by state in one query
        rows = (
            Job.objects.filter(Q(pk__in=batches) | Q(parent_id__in=batches))
            .values("state", batch=Coalesce("parent_id", "pk"))
            .annotate(n=Count("pk"))
            .order_by()
        )
        for row in rows:
            counts.setdefault(row["batch"], {})[row["state"]] = row["n"]
    for dependency in found:
        batch = counts[dependency.pk] if dependency.is_batch else None
        dependency.counts = sorted(batch.items()) if batch else None
        dependency.shard_count = shard_count(dependency, sum(batch.values())) if batch else ""
    return found


def waiting_for(user, job: Job) -> dict | None:
    """The jobs that wait for `job` (a shard: for its batch) that the user can see: the first
    SHOWN by id (`shown`, each with its dependency's `kind`) and how many more (`more`); None
    if there are none. Only while the job (a batch: any shard) has not ended: then each of its
    queued dependents waits for it. One query, however many there are."""
    root = job.parent_id or job.pk
    jobs = (
        visible_jobs(user)
        .filter(dependency_links__on_id=root, state=State.QUEUED)
        .filter(dependencies.unended(root))
        .annotate(kind=F("dependency_links__kind"), total=Window(Count("pk")))
        .order_by("pk")
    )
    shown = list(jobs[: dependencies.SHOWN])
    if not shown:
        return None
    return {"shown": shown, "more": shown[0].total - len(shown)}


@login_required
def submit(request):
    """The portal's submit form, checked by the same rules and limits as the REST API."""
    tenants = access.submit_tenants(request.user)
    # One key per form drawn, kept when it is drawn again with an error (forms.idempotency_key).
    values = {**submit_form.INITIAL, "form_key": secrets.token_hex(16)}
    copied = copy_of(request) if request.method == "GET" else None
    untypable: list[str] = []
    if copied is not None:  # a job's spec, to change and submit as a new job
        spec = spec_as_read(request.user, copied)
        values = {**submit_form.typed(spec, timezone.now()), "form_key": values["form_key"]}
        # A KEY=VALUE line cannot hold a value of several lines: said, not silently cut.
        untypable = [key for key, value in spec["env"].items() if "\n" in value]
        if not tenants.filter(slug=spec["tenant"]).exists():  # a viewer's, an outsider's copy
            values["tenant"] = ""  # chosen by the user, not the first team listed
    classes = submit_form.open_classes(tenants)
    if copied is not None and values["priority_class"] not in {c.name for c in classes}:
        values["priority_class"] = ""  # likewise: a class the user may not submit at
    errors, status, answer = {}, 200, None
    if request.method == "POST":
        values = submit_form.read(request.POST)
        data, errors = submit_form.serializer_input(values)
        checked = SubmitSerializer(
            data=data, tenants=tenants, jobs=visible_jobs(request.user), user=request.user
        )
        if checked.is_valid() and not errors:
            spec = dict(checked.validated_data)
            if "test_only" in request.POST:  # the same form drawn again, with the answer
                answer, errors, status = within_rates(request, spec, trial.estimate)
            else:
                job, errors, status = within_rates(request, spec, submit_one)
                if job is not None:
                    return redirect("job", pk=job.pk)
        else:
            errors, status = {**field_errors(checked.errors), **errors}, 400
    context = {
        "values": values,
        "errors": errors,
        "fields": described(errors, helps=SUBMIT_HELPS),
        "tenants": tenants,
        "priority_classes": classes,
        "default_class": submit_form.default_said(tenants),
        "topology_keys": topology_keys(),
        "volumes": TenantVolume.objects.filter(tenant__in=tenants).select_related("tenant"),
        "trial": answer,
        "copied": copied,
        "untypable": untypable,
        "mail_problem": mail_problem(request.user),
    }
    return render(request, "portal/submit.html", context, status=status)


def copy_of(request) -> Job | None:
    """The job `?copy=<id>` names, which the form is filled from; a 404 for one the user may
    not see, or for an id that is none."""
    if "copy" not in request.GET:
        return None
    pk = whole_number(request.GET["copy"])
    return get_object_or_404(visible_jobs(request.user), pk=pk if pk is not None else 0)


def topology_keys() -> list[str]:
    """The node topology labels' keys a gang may keep its nodes in one value of, as the
    platform's nodes report them (rack, nvlink, zone, host): the submit form offers them."""
    keys: set[str] = set()
    for labels in Node.objects.values_list("topology", flat=True).distinct():
        keys.update(key for key in labels if is_topology_key(key))
    return sorted(keys)


def within_rates(request, spec: dict, verb) -> tuple:
    """`verb(user, tenant, spec)` on a checked spec (a submission, or a test-only one: both
    count against the submission rates): its answer, or None with the errors and the status
    to answer with (a refusal it raises: a dependency that failed, as seen under its lock)."""
    wait = throttles.portal_submit_wait(request, spec["tenant"].slug)
    if wait is not None:
        return None, {"rate": f"Too many submissions: try again in {wait:.0f} s."}, 429
    try:
        return verb(request.user, spec.pop("tenant"), spec), {}, 200
    except ValidationError as refused:
        return None, field_errors(refused.detail), 400


def submit_one(user, tenant, spec: dict) -> Job:
    return actions.submit(user, tenant, spec)[0]


def field_errors(detail) -> dict[str, str]:
    """The serializer's errors, one line per field of the form."""
    errors: dict[str, str] = {}
    for field, inner in detail.items():
        name = submit_form.form_field(field)
        errors[name] = " ".join(filter(None, [errors.get(name), submit_form.error_text(inner)]))
    return errors


@never_cache  # the answer to a create holds the new key: no browser or proxy keeps it
@login_required
def api_tokens(request):
    """The user's own API tokens, and a new one: its key is on this response only."""
    blank = {"name": "", "expires": "", "read_only": False}
    values, errors, status, issued = blank, {}, 200, None
    if request.method == "POST":
        values = {"name": request.POST.get("name", ""), "expires": request.POST.get("expires", ""),
                  "read_only": bool(request.POST.get("read_only"))}  # fmt: skip
        try:
            days = tokens.parse_expiry(values["expires"])
            token, key = tokens.create_token(
                request.user, values["name"], days, read_only=values["read_only"]
            )
            issued, values = {"token": token, "key": key}, blank
        except tokens.TokenError as error:
            errors, status = {error.field: error.message}, 400
    context = {
        "tokens": request.user.api_tokens.all(),
        "issued": issued,
        "values": values,
        "errors": errors,
        "fields": described(errors),
        "expiry_days": tokens.EXPIRY_DAYS,
        "name_max": tokens.NAME_MAX,
        "now": timezone.now(),
        # Who the tokens speak for, as GET /api/v1/me/ says it.
        "memberships": request.user.memberships.select_related("tenant").order_by("tenant__slug"),
    }
    return render(request, "portal/tokens.html", context, status=status)


@login_required
@require_POST
def revoke_api_token(request, pk):
    # Only the user's own tokens: anyone else's is a 404, as if it did not exist.
    token = get_object_or_404(request.user.api_tokens, pk=pk)
    tokens.revoke_token(token, by=request.user)
    return redirect("api_tokens")
