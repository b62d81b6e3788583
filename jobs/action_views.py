"""The job page's actions, its forms posted: cancel, hold and release, requeue, resubmit, and
the changes of a job's dependencies, priority, batch limit on shards running at once, fewest
workers and labels; and the job list's, cancel, hold and release of the jobs ticked. Each does
what the API does, for whoever may; a refusal is the job page with why."""

import contextlib

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST
from rest_framework.exceptions import ValidationError

from jobs import access, actions, listing, throttles
from jobs import forms as submit_form
from jobs.access import visible_jobs
from jobs.action_serializers import (
    MAX_CANCELED,
    ConstraintsSerializer,
    DependenciesSerializer,
    MinWorkersSerializer,
    PrioritySerializer,
    RelabelSerializer,
    RequestSerializer,
    ResubmitSerializer,
    RetriesSerializer,
    RuntimeLimitSerializer,
    ShardLimitSerializer,
)
from jobs.cli.client import CONSTRAINTS
from jobs.cli.written import exit_codes_in, names_in
from jobs.forms import dependencies_input, refusal_text
from jobs.models import Job
from jobs.placement.words import counted
from jobs.serializers import REQUEST, mail_problem
from jobs.views import SHARD_LIMIT, job_page, page_jobs

PRIORITY_FIELDS = ["priority_class", "priority"]  # the job page's priority form


@login_required
@require_POST
def cancel(request, pk):
    # A cancel_job grant reaches a job its holder cannot see; neither access is a 404.
    job = access.to_change(request.user, pk, "cancel it")
    if actions.cancel(job, f"canceled by {request.user}") is None:
        job.refresh_from_db(fields=["state"])  # it may have ended since it was read
        return refused(request, pk, f"Job #{job.pk} has ended already ({job.state}).", 409)
    return back_to(request, job)


@login_required
@require_POST
def hold(request, pk, verb=actions.hold):
    """Hold a queued job, or release it (`verb`), as the API does; a refusal is the job page
    with why (409), a platform admin's hold is a 403 for anyone else."""
    job = access.to_change(request.user, pk, "hold or release it")
    try:
        verb(job, str(request.user), admin=request.user.is_superuser)
    except actions.AdminHold as refusal:
        raise PermissionDenied(str(refusal)) from None
    except actions.HoldRefused as refusal:
        return refused(request, pk, str(refusal), 409)
    return back_to(request, job)


@login_required
@require_POST
def requeue(request, pk):
    """Stop a scheduled or running job and queue it again, held if the form's `hold` box is
    ticked, as the API does; a refusal is the job page with why (409)."""
    job = access.to_change(request.user, pk, "requeue it")
    hold = request.POST.get("hold") == "on"
    try:
        actions.requeue(job, str(request.user), hold=hold, admin=request.user.is_superuser)
    except actions.RequeueRefused as refusal:
        return refused(request, pk, str(refusal), 409)
    return back_to(request, job)


@login_required
@require_POST
def change_dependencies(request, pk):
    """Replace a queued job's dependencies with those typed as Slurm writes them, as the API
    does, for whoever may cancel the job; a refusal is the job page with why and what was
    typed: 400 for what the API refuses as a 400, 409 for a job that has left the queue."""
    job = get_object_or_404(access.cancel_targets(request.user).select_related("tenant"), pk=pk)
    if why := access.dependencies_refusal(request.user, job):
        raise PermissionDenied(why)
    typed = request.POST.get("dependencies", "")
    change = DependenciesSerializer(
        data=dependencies_input(typed), job=job, jobs=visible_jobs(request.user)
    )
    try:
        change.is_valid(raise_exception=True)
        waits, singleton = change.validated_data["depends_on"], change.validated_data["singleton"]
        actions.set_dependencies(job, waits, singleton, str(request.user))
    except ValidationError as refusal:  # it may name a job the caller may not see
        refusal = access.refusal_as_read(request.user, refusal)
        return refused(request, pk, refusal_text(refusal.detail), 400, typed, ["dependencies"])
    except actions.DependenciesRefused as refusal:
        return refused(request, pk, str(refusal), 409, typed)
    return back_to(request, job)


@login_required
@require_POST
def change_priority(request, pk):
    """Move a queued job to another priority class or priority within it, as the API does, for
    whoever may cancel it; a refusal is the job page with why (400, or 409 once it has left the
    queue)."""
    job = access.to_change(request.user, pk, "change its priority", "tenant")
    asked = {k: request.POST[k] for k in PRIORITY_FIELDS if request.POST.get(k)}
    change = PrioritySerializer(data=asked, job=job)
    try:
        change.is_valid(raise_exception=True)
        actions.reprioritize(job, str(request.user), **change.validated_data)
    except ValidationError as refusal:
        # A refusal of neither field in particular (that none is given) is about both.
        at_fault = [name for name in PRIORITY_FIELDS if name in refusal.detail] or PRIORITY_FIELDS
        return refused(request, pk, refusal_text(refusal.detail), 400, invalid=at_fault)
    except actions.NotQueued as refusal:
        return refused(request, pk, str(refusal), 409)
    return back_to(request, job)


@login_required
@require_POST
def change_shard_limit(request, pk):
    """Change how many of a batch's shards may run at once, as the API does, for whoever may
    cancel it: a number, or nothing for no limit. A refusal is the job page with why (400, or
    409 for a shard other than the batch's first, or a batch that has ended)."""
    return number_change(request, pk, "change its limit", SHARD_LIMIT, ShardLimitSerializer,
                         actions.set_shard_limit, actions.ShardLimitRefused)  # fmt: skip


@login_required
@require_POST
def change_min_workers(request, pk):
    """Make a queued training job elastic, or rigid again, as the API does, for whoever may
    cancel it: the fewest workers it may start with, or nothing for all of them together. A
    refusal is the job page with why (400, or 409 once it has left the queue)."""
    return number_change(request, pk, "change its fewest workers", "min_workers",
                         MinWorkersSerializer, actions.set_min_workers,
                         actions.MinWorkersRefused)  # fmt: skip


@login_required
@require_POST
def change_runtime_limit(request, pk):
    """Change a job's runtime limit (seconds), as the API does, for whoever may cancel it: a
    queued job's, or a placed job's to a lower one. A refusal is the job page with why (400,
    or 409 for a higher limit once it is placed, or once it has ended)."""
    return number_change(request, pk, "change its runtime limit", "max_runtime_s",
                         RuntimeLimitSerializer, actions.set_runtime_limit,
                         actions.NotQueued)  # fmt: skip


@login_required
@require_POST
def change_request(request, pk):
    """Change what each worker of a queued job asks for (the fields typed; those left empty
    are kept), as the API does, for whoever may cancel it. A refusal is the job page with why
    (400, on the fields at fault, or 409 once it has left the queue)."""
    job = access.to_change(request.user, pk, "change what it asks for")
    typed = {name: value for name in REQUEST if (value := request.POST.get(name, "").strip())}
    return job_change(request, job, typed, RequestSerializer, actions.change_request, REQUEST)


@login_required
@require_POST
def change_constraints(request, pk):
    """Change where a queued job may run, as the API does, for whoever may cancel it: its GPU types
    (comma-separated, most preferred first), its cluster selector (KEY=VALUE a line), each empty
    for any, the nodes it excludes and the features it requires (comma-separated, empty for none),
    the nodes it runs on alone (comma-separated, empty for any), how long it takes its first GPU
    type alone (seconds, empty for no wait) and whether each worker takes a node to itself (its
    box). A refusal is the job page with why (400, on the field at fault, or 409 once it has left
    the queue)."""
    job = access.to_change(request.user, pk, "change where it may run")
    try:
        selector = submit_form.parse_pairs(request.POST.get("cluster_selector", ""))
    except ValueError as error:
        return refused(request, pk, str(error), 400, invalid=["cluster_selector"])
    asked = {
        "gpu_types": names_in(request.POST.get("gpu_types", "")),
        "cluster_selector": selector,
        "exclude_nodes": names_in(request.POST.get("exclude_nodes", "")),
        "only_nodes": names_in(request.POST.get("only_nodes", "")),
        "features": names_in(request.POST.get("features", "")),
        "first_type_wait_s": request.POST.get("first_type_wait_s", "").strip() or None,
        "exclusive": request.POST.get("exclusive") == "true",
    }
    verb = actions.change_constraints
    return job_change(request, job, asked, ConstraintsSerializer, verb, CONSTRAINTS)


def job_change(
    request,
    job,
    typed: dict,
    serializer,
    verb,
    fields,
    conflict: type[Exception] = actions.NotQueued,
) -> HttpResponse:
    """A job's `fields` changed from its page's form (`typed`, once `serializer` has read it)
    by `verb(job, asked, by)`. A refusal is the job page with why: 400 on the fields at fault
    (all of them when the refusal names none), 409 for the verb's `conflict` (a queued job's
    change: once it has left the queue)."""
    change = serializer(data=typed)
    try:
        change.is_valid(raise_exception=True)
        verb(job, change.validated_data, str(request.user))
    except ValidationError as refusal:
        at_fault = [name for name in fields if name in refusal.detail] or list(fields)
        return refused(request, job.pk, refusal_text(refusal.detail), 400, invalid=at_fault)
    except conflict as refusal:
        return refused(request, job.pk, str(refusal), 409)
    return back_to(request, job)


def number_change(request, pk, doing: str, name: str, serializer, verb, conflict: type[Exception]):
    """A job's number `name` changed from its page's form (nothing typed: None) by
    `verb(job, number, by)`, once `serializer` has read it, for whoever may cancel the job
    (`doing`, for the refusal of anyone else). A refusal is the job page with why, on the
    field: 400 for what the serializer or the verb refuses as invalid, 409 for the verb's
    `conflict`."""
    job = access.to_change(request.user, pk, doing)
    typed = request.POST.get(name, "").strip()
    change = serializer(data={name: typed or None})
    try:
        change.is_valid(raise_exception=True)
        verb(job, change.validated_data[name], str(request.user))
    except ValidationError as refusal:
        return refused(request, pk, refusal_text(refusal.detail), 400, invalid=[name])
    except conflict as refusal:
        return refused(request, pk, str(refusal), 409)
    return back_to(request, job)


@login_required
@require_POST
def change_labels(request, pk):
    """Replace a job's labels with those typed (KEY=VALUE lines), as the API sets and removes
    them, for whoever may cancel it, in any state. A refusal is the job page with why (400, or
    409 for a shard other than a batch's first)."""
    job = access.to_change(request.user, pk, "change its labels")
    try:
        typed = submit_form.parse_pairs(request.POST.get("labels", ""))
    except ValueError as error:
        return refused(request, pk, str(error), 400, invalid=["labels"])
    gone = [key for key in job.labels if key not in typed]
    change = RelabelSerializer(data={"labels": typed, "remove": gone})
    try:
        change.is_valid(raise_exception=True)
        actions.relabel(job, typed, gone, str(request.user))
    except ValidationError as refusal:
        return refused(request, pk, refusal_text(refusal.detail), 400, invalid=["labels"])
    except actions.RelabelRefused as refusal:
        return refused(request, pk, str(refusal), 409)
    return back_to(request, job)


@login_required
@require_POST
def change_notifications(request, pk):
    """Set what a job is told of to the boxes ticked, as the API sets it, for whoever may
    cancel it while it lives. A refusal is the job page with why (400, or 409 for a job that
    has ended or a shard other than a batch's first)."""
    job = access.to_change(request.user, pk, "change its notifications")
    # A box not drawn (time-limit warnings on a batch, email the platform cannot send) is left.
    drawn = [name for name in actions.TOLD if name != "notify_time_limit" or not job.is_batch]
    if "notify_email" in drawn and not job.notify_email and mail_problem(job.owner):
        drawn.remove("notify_email")
    asked = {name: request.POST.get(name) == "true" for name in drawn}
    try:
        actions.set_notifications(job, asked, str(request.user))
    except ValidationError as refusal:
        return refused(request, pk, refusal_text(refusal.detail), 400)
    except actions.LiveChangeRefused as refusal:
        return refused(request, pk, str(refusal), 409)
    return back_to(request, job)


@login_required
@require_POST
def change_retries(request, pk):
    """Set what a job retries to what the form says (its most retries, its exit codes, whether
    every failure of its own), as the API sets it, for whoever may cancel it while it lives.
    A refusal is the job page with why (400 on the field at fault, or 409 for a job that has
    ended or a shard other than a batch's first)."""
    job = access.to_change(request.user, pk, "change its retries")
    try:
        codes = exit_codes_in(request.POST.get("retry_exit_codes", ""))
    except ValueError as error:
        return refused(request, pk, str(error), 400, invalid=["retry_exit_codes"])
    typed = {"max_retries": request.POST.get("max_retries", "").strip() or job.max_retries,
             "retry_exit_codes": codes,
             "retry_user_errors": request.POST.get("retry_user_errors") == "true"}  # fmt: skip
    return job_change(request, job, typed, RetriesSerializer, actions.set_retries, tuple(typed),
                      actions.LiveChangeRefused)  # fmt: skip


def refused(request, pk, why: str, status: int, typed: str | None = None, invalid=()):
    """A refused action: the job page with why (and the `invalid` fields), or, for a holder of
    a cancel_job grant alone, who has no job page, the refusal as the API's."""
    if seen := page_jobs(request.user).filter(pk=pk).first():
        return job_page(request, seen, why, status, typed, invalid)
    return HttpResponse(why, status=status, content_type="text/plain; charset=utf-8")


@login_required
@require_POST
def resubmit(request, pk):
    """Run an ended job again as a new job, counted like a submission from the form; the
    rerun form's `shards` ("unsucceeded") runs a batch's shards that did not succeed alone."""
    job = get_object_or_404(page_jobs(request.user), pk=pk)
    if not access.can_resubmit(request.user, job):
        raise PermissionDenied("You may see this job but not resubmit it.")
    asked = ResubmitSerializer(
        data={k: request.POST[k] for k in ("idempotency_key", "shards") if k in request.POST},
        job=job,
    )
    try:
        asked.is_valid(raise_exception=True)
        shards, key = (asked.validated_data.get(name) for name in ("shards", "idempotency_key"))
        actions.check_resubmittable(job, shards, key)  # a refusal costs no submission
    except actions.NotResubmittable as refusal:
        return job_page(request, job, str(refusal), 409)
    except ValidationError as refused:
        return job_page(request, job, submit_form.error_text(refused.detail), 400)
    if (wait := throttles.portal_submit_wait(request, job.tenant.slug)) is not None:
        return job_page(request, job, f"Too many submissions: try again in {wait:.0f} s.", 429)
    try:
        again, _ = actions.resubmit(request.user, job, key, shards)
    except actions.NotResubmittable as refusal:
        return job_page(request, job, str(refusal), 409)
    except ValidationError as refused:  # a rule of submission no longer met, as the API says
        return job_page(request, job, submit_form.error_text(refused.detail), 400)
    return redirect("job", pk=again.pk)


def back_to(request, job):
    """The job's page after a change, or the job list for a caller who may change the job but
    not see it: its page would be a 404 for a holder of a cancel grant alone."""
    if not access.can_see(request.user, job):
        return redirect("index")
    return redirect("job", pk=job.pk)


# The job list's verbs on the jobs ticked, but cancel (one cancel of them all: cancel_ticked):
# each as the job page's button does it. And how the list then says what each did.
TICKED_VERBS = {
    "hold": lambda job, request: actions.hold(job, str(request.user),
                                              admin=request.user.is_superuser),
    "release": lambda job, request: actions.release_hold(job, str(request.user),
                                                         admin=request.user.is_superuser),
}  # fmt: skip
TICKED_SAID = {"cancel": ("Canceled", "had already ended"), "hold": ("Held", "had nothing queued"),
               "release": ("Released", "had no hold you may release")}  # fmt: skip
MAX_SELECTED = 100  # jobs ticked at once: two pages of the list


@login_required
@require_POST
def act_on_selected(request):
    """Cancel, hold or release (`verb`) each job ticked on the job list (`id`, repeated; a
    batch's row: its shards, as its page's button), of those the user may cancel, then show the
    list again (`next`, the list's address with its filters) with what was done. A verb or an
    id that is not one is a 400 naming it; a job the user may not cancel is left alone."""
    verb = request.POST.get("verb", "")
    written = request.POST.getlist("id")
    if verb not in TICKED_SAID:
        problem = f"verb: one of {', '.join(TICKED_SAID)}."
    elif not all(text.isascii() and text.isdigit() for text in written):
        problem = "id: job ids, whole numbers."
    elif len(written) > MAX_SELECTED:
        problem = f"id: at most {MAX_SELECTED} jobs at once."
    else:
        problem = ""
    if problem:
        return HttpResponse(problem, status=400, content_type="text/plain; charset=utf-8")
    ids = sorted({int(text) for text in written})
    mayed = list(access.cancelable_jobs(request.user).filter(pk__in=ids).order_by("pk"))
    if verb == "cancel":
        done = cancel_ticked([job.pk for job in mayed], f"canceled by {request.user}")
    else:
        done = set()
        for job in mayed:
            with contextlib.suppress(actions.HoldRefused):
                if TICKED_VERBS[verb](job, request):
                    done.add(job.pk)
    left = [job.pk for job in mayed if job.pk not in done]
    if not ids:
        messages.info(request, "No job was ticked.")
    else:
        done_said, left_said = TICKED_SAID[verb]
        said = f"{done_said} {counted(len(done), 'job')}"
        if left:
            said += f"; {', '.join(f'#{pk}' for pk in left)} {left_said}"
        messages.success(request, f"{said}.")
    back = request.POST.get("next", "")
    # A path of this site alone: `redirect` would take any other word for a view's name.
    if not back.startswith("/") or not url_has_allowed_host_and_scheme(
        back, {request.get_host()}, request.is_secure()
    ):
        back = "/"
    return HttpResponseRedirect(back)


@login_required
@require_http_methods(["GET", "POST"])
def cancel_matching(request):
    """Cancel the live jobs the job list's filters match on every page, of those the user may
    cancel (each of a batch's shards as it matches, not through its first shard's row), after
    a confirmation: a GET says how many and asks; a POST of the same filters cancels them,
    oldest first, at most MAX_CANCELED (the rest on a press again), and shows the list again
    with what it did. The list's errors are a 400 naming them; a list that names no part of
    one's jobs (`listing.NARROWING`) is a 400 too: every live job one may cancel is not what
    a filtered list's button means."""
    params = (request.GET if request.method == "GET" else request.POST).copy()
    params.pop("before", None)  # every page
    params.pop("csrfmiddlewaretoken", None)
    labels = list(dict.fromkeys(text for text in params.getlist("label") if text))
    asked = listing.asked(params, request.user, labels)
    if not asked.errors and not listing.narrowed(params):
        asked.errors["filters"] = (
            "Narrow the list to a part of your jobs first (a team, a name, a label, your own, "
            "a batch, ids or a node): a state or a time alone names every job you may cancel."
        )
    if asked.errors:
        said = "; ".join(f"{name}: {why}" for name, why in asked.errors.items())
        return HttpResponse(said, status=400, content_type="text/plain; charset=utf-8")
    mayed = access.cancelable_jobs(request.user) & visible_jobs(request.user)
    matching = asked.of(mayed, request.user, fold=False).live()
    filters = params.urlencode()
    if request.method == "GET":
        context = {"count": matching.count(), "filters": filters, "params": list(params.lists()),
                   "most": MAX_CANCELED}  # fmt: skip
        return render(request, "portal/cancel_matching.html", context)
    canceled, more = actions.cancel_first(matching, MAX_CANCELED, f"canceled by {request.user}")
    said = f"Canceled {counted(len(canceled), 'job')} these filters match"
    messages.success(request, said + ("; more are left: cancel again." if more else "."))
    return redirect(f"{reverse('index')}?{filters}")


def cancel_ticked(ticked: list[int], reason: str) -> set[int]:
    """Cancel the jobs ticked (a batch's first shard: every shard of it), all in one cancel
    (actions.cancel_jobs, as the API's cancel of many), and return those of them something
    of which was canceled."""
    canceled = actions.cancel_jobs(access.with_shards(Job.objects.filter(pk__in=ticked)), reason)
    parents = Job.objects.filter(pk__in=canceled).values_list("parent_id", flat=True)
    return set(ticked) & {*canceled, *parents}
