"""The users' REST API under /api/v1/: thin views over jobs.actions.

Every queryset starts from the caller's visible jobs (jobs.access): another tenant's job is a
404, never a 403 that would confirm it exists.
"""

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db.models import Max
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils.http import content_disposition_header
from rest_framework import status
from rest_framework.exceptions import PermissionDenied, Throttled, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.models import Booking
from jobs import access, actions, folding, listing, standing, throttles, trial
from jobs.action_serializers import (
    MAX_CANCELED,
    CancelJobsSerializer,
    ConstraintsSerializer,
    DependenciesSerializer,
    MinWorkersSerializer,
    NotificationsSerializer,
    PrioritySerializer,
    RelabelSerializer,
    RequestSerializer,
    RequeueSerializer,
    ResubmitSerializer,
    RetriesSerializer,
    RuntimeLimitSerializer,
    ShardLimitSerializer,
)
from jobs.cli.client import CONSTRAINTS
from jobs.fields import body_of
from jobs.maintenance_api import (
    BookingsView,
    MaintenanceView,
    WindowView,
    window_ahead,
)
from jobs.models import Job, LogChunk
from jobs.nodes_api import NODE_VERBS, ClustersView, NodeServiceView, NodesView
from jobs.queue_api import QueueView
from jobs.serializers import (
    REQUEST,
    EventSerializer,
    JobSerializer,
    LogLineSerializer,
    SubmitSerializer,
    spec_as_read,
    whole_number,
)
from jobs.states import State, batch_state
from jobs.throttles import SubmitRate, TenantSubmitRate
from jobs.usage_api import DailyUsageView, UsageView

PAGE = 100
MAX_TAIL = 5000  # log lines a tail read gives at most
MAX_EVENTS = 1000  # events a read of the last ones gives at most
LOG_BATCH = 5000  # log rows a download reads at a time
MAX_GREP = 200  # characters of the text a log read keeps the lines holding


def visible(request):
    return (
        access.visible_jobs(request.user)
        .select_related("tenant", "owner", "priority_class")
        .prefetch_related("attempts__cluster", "attempts__allocations__node", "dependency_links")
        .with_end_reason()
    )


def job_json(request, job) -> dict:
    return JobSerializer(job, context=reading(request, [job])).data


def reading(request, jobs: list[Job]) -> dict:
    """JobSerializer's context for the reader of `jobs`."""
    mine = access.tenant_ids(request.user)
    return {"hidden": access.hidden_from(request.user, jobs, mine), "mine": mine}


class JobsView(APIView):
    def get_throttles(self):
        extra = [SubmitRate(), TenantSubmitRate()] if self.request.method == "POST" else []
        return [*super().get_throttles(), *extra]

    def get(self, request):
        """The caller's jobs, newest first, PAGE at a time, narrowed as jobs/listing.py reads
        the parameters (the portal's list's), folded with `?fold=1`."""
        asked = listing.asked(request.query_params, request.user,
                              request.query_params.getlist("label"))  # fmt: skip
        fold = listing.yes(request.query_params, "fold", asked.errors)
        if fold and "batch" in request.query_params:
            asked.errors["fold"] = "A batch's shards are listed one by one: not both."
        if asked.errors:
            raise ValidationError(asked.errors)
        jobs = asked.of(visible(request).order_by("-id"), request.user, fold=fold)
        page = list(jobs[:PAGE])
        listed = JobSerializer(page, many=True, context=reading(request, page)).data
        if fold:  # each batch's row with its shards counted, as the job's own answer has them
            batches = folding.shards_of(page)
            for job, data in zip(page, listed, strict=True):
                if (shards := batches.get(job.pk)) is not None:
                    data["shard_states"] = shards.states
                    data["batch_state"] = batch_state(shards.states)
                    data["shards_waiting"] = shards.waiting
        # A queued job's place in line, as the portal's list says it (a folded batch: none).
        places = standing.places(page, access.tenant_ids(request.user))
        for job, data in zip(page, listed, strict=True):
            data["place"] = None if "shard_states" in data else places.get(job.pk)
        return Response({"jobs": listed, "next": page[-1].pk if len(page) == PAGE else None})

    def post(self, request):
        tenant, spec = submission(request)
        job, created = actions.submit(request.user, tenant, spec)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(job_json(request, visible(request).get(pk=job.pk)), status=code)


def submission(request) -> tuple:
    """The body of a submission, checked (a 400 naming the field): (tenant, the rest)."""
    checked = SubmitSerializer(
        data=request.data,
        tenants=access.submit_tenants(request.user),
        jobs=access.visible_jobs(request.user),
        user=request.user,
    )
    checked.is_valid(raise_exception=True)
    spec = dict(checked.validated_data)
    return spec.pop("tenant"), spec


class SubmitTestOnlyView(APIView):
    """A test-only submission (Slurm's sbatch --test-only): a submission's body, checked as
    one is, answered with what the scheduler would decide now (jobs.trial); nothing is
    written. It costs a whole placement over the queue: it counts against the user's and the
    tenant's submission rates as a submission does. A read-only token may ask it."""

    writes_nothing = True  # quotas.auth.TokenScope

    def get_throttles(self):
        return [*super().get_throttles(), SubmitRate(), TenantSubmitRate()]

    def post(self, request):
        tenant, spec = submission(request)
        return Response(trial.estimate(request.user, tenant, spec))


class JobView(APIView):
    def get(self, request, pk):
        job = get_object_or_404(visible(request), pk=pk)
        data = job_json(request, job)
        states = job.shard_states() if job.is_batch else {job.state: 1}
        running = job.state in (State.SCHEDULED, State.RUNNING)
        data["window_ahead"] = window_ahead(job) if running else None
        data["standing"] = standing.read_by(request.user, job)
        if job.is_batch:
            data["shard_states"] = states
            data["batch_state"] = batch_state(states)
        # The hold verb open to the reader (hold, release or ""): the job page's button.
        may = State.QUEUED in states and access.can_cancel(request.user, job)
        data["hold_verb"] = actions.hold_verb(job, admin=request.user.is_superuser) if may else ""
        return Response(data)


class CancelView(APIView):
    def post(self, request, pk):
        # A cancel_job grant reaches a job its holder cannot see; neither access is a 404.
        job = access.to_change(request.user, pk, "cancel it")
        body_of(request)  # a cancel takes no field: `shards` or `reason` is refused, not ignored
        if actions.cancel(job, f"canceled by {request.user}") is None:
            job.refresh_from_db(fields=["state"])  # it may have ended since it was read
            return Response({"detail": f"The job has ended already ({job.state})."},
                            status=status.HTTP_409_CONFLICT)  # fmt: skip
        job.refresh_from_db()
        if not access.can_see(request.user, job):
            # The grant is to cancel, not to read: no command, env or attempts.
            return Response({"id": job.pk, "state": job.state}, status=status.HTTP_202_ACCEPTED)
        return Response(job_json(request, job), status=status.HTTP_202_ACCEPTED)


class CancelJobsView(APIView):
    """Cancel the jobs a filter names (CancelJobsSerializer): those the caller may cancel that
    have not ended, at most MAX_CANCELED a request, oldest first (`more`: ask again). A batch
    matched through its first shard stands for all its shards, as a cancel of it does; `state`
    then keeps those of its shards in that state."""

    def post(self, request):
        asked = CancelJobsSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        data = asked.validated_data
        tenant = None
        if "tenant" in data:
            tenant = access.tenants_of(request.user).filter(slug=data["tenant"]).first()
            if tenant is None:
                raise ValidationError({"tenant": f"No tenant {data['tenant']!r} of yours."})
        named = access.cancel_matches(
            request.user, ids=data.get("ids"), name=data.get("name"), tenant=tenant,
            mine=data["mine"], state=data.get("state"), labels=data.get("labels"),
        )  # fmt: skip
        canceled, more = actions.cancel_first(named, MAX_CANCELED, f"canceled by {request.user}")
        return Response({"canceled": canceled, "more": more}, status=status.HTTP_202_ACCEPTED)


def changed_answer(request, job, changed: int, told, code=status.HTTP_200_OK) -> Response:
    """A change's answer, with `changed`, how many jobs it changed: the job as the caller sees
    it, or, for a caller who may change it but not see it (a cancel_job grant alone), its id,
    its state and `told(job)`, what the change set."""
    job.refresh_from_db()
    if access.can_see(request.user, job):
        return Response({**job_json(request, job), "changed": changed}, status=code)
    return Response({"id": job.pk, "state": job.state, **told(job), "changed": changed},
                    status=code)  # fmt: skip


class HoldView(APIView):
    """Hold a queued job, or release it (`verb`): whoever may cancel a job may hold it. A
    platform admin's hold only a platform admin releases (403 for anyone else)."""

    verb = staticmethod(actions.hold)

    def post(self, request, pk):
        job = access.to_change(request.user, pk, "hold or release it")
        body_of(request)
        try:
            changed = self.verb(job, str(request.user), admin=request.user.is_superuser)
        except actions.AdminHold as refusal:
            raise PermissionDenied(str(refusal)) from None
        except actions.HoldRefused as refusal:
            return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
        # `changed`: the jobs held or released, a batch's queued shards (its first may run).
        return changed_answer(request, job, changed, lambda job: {"held": job.held})


class RequeueView(APIView):
    """Stop a scheduled or running job and queue it again (actions.requeue), held with
    `{"hold": true}`: whoever may cancel a job may; a platform admin's hold only a platform
    admin releases. 202: its agent stops it within its grace period."""

    def post(self, request, pk):
        job = access.to_change(request.user, pk, "requeue it")
        asked = RequeueSerializer(data=request.data)
        asked.is_valid(raise_exception=True)
        hold = asked.validated_data["hold"]
        try:
            changed = actions.requeue(
                job, str(request.user), hold=hold, admin=request.user.is_superuser
            )
        except actions.RequeueRefused as refusal:
            return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
        return changed_answer(request, job, changed, lambda job: {"held": job.held},
                              status.HTTP_202_ACCEPTED)  # fmt: skip


class PriorityView(APIView):
    """Change a queued job's priority class or priority (actions.reprioritize): whoever may
    cancel a job may, to a class open to its tenant."""

    def post(self, request, pk):
        job = access.to_change(request.user, pk, "change its priority", "tenant")
        change = PrioritySerializer(data=request.data, job=job)
        change.is_valid(raise_exception=True)
        try:
            changed = actions.reprioritize(job, str(request.user), **change.validated_data)
        except actions.NotQueued as refusal:
            return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
        return changed_answer(request, job, changed, lambda job: {
            "priority_class": job.priority_class.name, "priority": job.priority})  # fmt: skip


class ShardLimitView(APIView):
    """Change how many of a batch's shards may run at once (actions.set_shard_limit), on its
    first shard, while it lives: whoever may change its priority may."""

    def post(self, request, pk):
        return number_change(request, pk, "change its limit", ShardLimitSerializer,
                             actions.set_shard_limit, actions.ShardLimitRefused)  # fmt: skip


class MinWorkersView(APIView):
    """Make a queued training job elastic, or rigid again (actions.set_min_workers): whoever
    may change its priority may."""

    def post(self, request, pk):
        job = access.to_change(request.user, pk, "change its fewest workers")
        change = MinWorkersSerializer(data=request.data)
        change.is_valid(raise_exception=True)
        try:
            actions.set_min_workers(job, change.validated_data["min_workers"], str(request.user))
        except actions.MinWorkersRefused as refusal:
            return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
        # One job changed: a training job is no batch.
        return changed_answer(request, job, 1, lambda job: {
            "workers": job.workers, "min_workers": job.min_workers})  # fmt: skip


class RuntimeLimitView(APIView):
    """Change a job's runtime limit (actions.set_runtime_limit: a queued job's, or a placed
    one's to a lower one; a batch: its shards'): whoever may change its priority may."""

    def post(self, request, pk):
        verb, refused = actions.set_runtime_limit, actions.NotQueued
        return number_change(request, pk, "change its runtime limit", RuntimeLimitSerializer,
                             verb, refused, "priority_class")  # fmt: skip


def number_change(request, pk, doing: str, serializer, verb, conflict: type[Exception], *related):
    """A job's one number, the `serializer`'s one field, changed by `verb(job, number, by)`
    for whoever may cancel it (`doing`, for the refusal of anyone else; `related`: the rows
    the verb reads with the job): 400 for what the serializer or the verb refuses as invalid,
    409 for the verb's `conflict`; else the job, the number and how many jobs changed."""
    job = access.to_change(request.user, pk, doing, *related)
    change = serializer(data=request.data)
    change.is_valid(raise_exception=True)
    [(name, number)] = change.validated_data.items()
    try:
        changed = verb(job, number, str(request.user))
    except conflict as refusal:
        return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
    return changed_answer(request, job, changed, lambda job: {name: number})


class RequestView(APIView):
    """Change what each worker of a queued job asks for (actions.change_request; a batch: its
    queued shards'): whoever may change its priority may."""

    def post(self, request, pk):
        verb = actions.change_request
        return job_change(request, pk, "change what it asks for", RequestSerializer, verb, asks)


class ConstraintsView(APIView):
    """Change where a queued job may run (actions.change_constraints; a batch: its queued
    shards'): whoever may change its priority may."""

    def post(self, request, pk):
        verb = actions.change_constraints
        return job_change(request, pk, "change where it may run", ConstraintsSerializer, verb,
                             where_to)  # fmt: skip


def job_change(
    request, pk, doing: str, serializer, verb, told, conflict: type[Exception] = actions.NotQueued
) -> Response:
    """A job's fields, those the `serializer` reads, changed by `verb(job, asked, by)` for
    whoever may cancel it (`doing`, for the refusal of anyone else): 400 for what the
    serializer or the verb refuses as invalid, 409 for the verb's `conflict` (a queued job's
    change: once nothing of it is queued); else the job and how many jobs changed
    (`told(job)`: what the change set, for a caller who may not see the job)."""
    job = access.to_change(request.user, pk, doing)
    change = serializer(data=request.data)
    change.is_valid(raise_exception=True)
    try:
        changed = verb(job, change.validated_data, str(request.user))
    except conflict as refusal:
        return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
    return changed_answer(request, job, changed, told)


def asks(job: Job) -> dict:
    """What each worker of the job asks for, as the API names it."""
    return {name: getattr(job, name) for name in REQUEST}


def where_to(job: Job) -> dict:
    """Where the job may run, as the API names it."""
    return {name: getattr(job, name) for name in CONSTRAINTS}


class LabelsView(APIView):
    """Set or remove a job's labels (actions.relabel; a batch, through its first shard: every
    shard's), in any state: whoever may cancel it may."""

    def post(self, request, pk):
        job = access.to_change(request.user, pk, "change its labels")
        change = RelabelSerializer(data=request.data)
        change.is_valid(raise_exception=True)
        asked = change.validated_data
        try:
            labels, changed = actions.relabel(
                job, asked.get("labels", {}), asked.get("remove", []), str(request.user)
            )
        except actions.RelabelRefused as refusal:
            return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
        return changed_answer(request, job, changed, lambda job: {"labels": labels})


class NotificationsView(APIView):
    """Change what a job's team's webhook is told of it and whether its submitter is emailed
    (actions.set_notifications; a batch, through its first shard: every shard's), while it has
    not ended: whoever may cancel it may."""

    def post(self, request, pk):
        return job_change(request, pk, "change its notifications", NotificationsSerializer,
                          actions.set_notifications, fields_of(tuple(actions.TOLD)),
                          actions.LiveChangeRefused)  # fmt: skip


# What a job retries, as the API names it.
RETRIES = ("max_retries", "retries_used", "retry_user_errors", "retry_exit_codes")


class RetriesView(APIView):
    """Change what a job retries (actions.set_retries; a batch, through its first shard: every
    shard's), while it has not ended: whoever may cancel it may."""

    def post(self, request, pk):
        return job_change(request, pk, "change its retries", RetriesSerializer,
                          actions.set_retries, fields_of(RETRIES),
                          actions.LiveChangeRefused)  # fmt: skip


def fields_of(names: tuple[str, ...]):
    """What a change set, as the API names it: these fields of the job."""
    return lambda job: {name: getattr(job, name) for name in names}


class DependenciesView(APIView):
    """Replace a queued job's dependencies (Slurm's `scontrol update dependency=`), as a
    submission gives them: whoever may cancel a job and sees every job it waits for may change
    them, naming jobs of its tenant they can see."""

    def post(self, request, pk):
        job = get_object_or_404(access.cancel_targets(request.user).select_related("tenant"), pk=pk)
        if why := access.dependencies_refusal(request.user, job):
            raise PermissionDenied(why)
        change = DependenciesSerializer(
            data=request.data, job=job, jobs=access.visible_jobs(request.user)
        )
        change.is_valid(raise_exception=True)
        waits, singleton = change.validated_data["depends_on"], change.validated_data["singleton"]
        try:
            changed = actions.set_dependencies(job, waits, singleton, str(request.user))
        except actions.DependenciesRefused as refusal:
            return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
        except ValidationError as refusal:  # it may name a job the caller may not see
            raise access.refusal_as_read(request.user, refusal) from None
        if not access.can_see(request.user, job):
            # The grant is to cancel, not to read: what was asked, and no more.
            data = {
                "id": job.pk,
                "state": State.QUEUED,
                "singleton": singleton,
                "dependencies": [{"id": on, "kind": kind} for on, kind in sorted(waits)],
            }
            return Response({**data, "changed": changed})
        return Response({**job_json(request, visible(request).get(pk=job.pk)), "changed": changed})


class ResubmitView(APIView):
    """Run an ended job again (actions.resubmit); a batch's `shards` alone, "unsucceeded" or
    a list of indexes (ResubmitSerializer)."""

    def post(self, request, pk):
        job = get_object_or_404(access.visible_jobs(request.user).select_related("tenant"), pk=pk)
        if not access.can_resubmit(request.user, job):
            raise PermissionDenied("You may see this job but not resubmit it.")
        asked = ResubmitSerializer(data=request.data, job=job)
        asked.is_valid(raise_exception=True)
        key, shards = (asked.validated_data.get(name) for name in ("idempotency_key", "shards"))
        try:
            actions.check_resubmittable(job, shards, key)  # a refusal costs no submission
        except actions.NotResubmittable as refusal:
            return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
        # A submission, counted against the user's and the tenant's submission rates as POST
        # /jobs/ is; the tenant is the job's, not named in a body for the throttles to read.
        if (wait := throttles.portal_submit_wait(request, job.tenant.slug)) is not None:
            raise Throttled(wait)
        try:
            again, created = actions.resubmit(request.user, job, key, shards)
        except actions.NotResubmittable as refusal:  # it went live meanwhile
            return Response({"detail": str(refusal)}, status=status.HTTP_409_CONFLICT)
        data = job_json(request, visible(request).get(pk=again.pk))
        return Response(data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class SpecView(APIView):
    """The job as a submission of it would be written (`POST /api/v1/jobs/` takes it as it
    is): to keep, or to change and submit, as Slurm's scontrol write batch_script and
    kubectl get -o yaml give a job back. A batch's shard gives its batch's; the jobs it
    waits for that the reader may not see are left out."""

    def get(self, request, pk):
        job = get_object_or_404(access.visible_jobs(request.user), pk=pk)
        return Response(spec_as_read(request.user, job))


class EventsView(APIView):
    """The job's transitions, oldest first; `last=N` (at most MAX_EVENTS) gives its last N,
    still oldest first, and `earlier`, whether there are more before them (the job page
    redraws its history from them as the job moves)."""

    def get(self, request, pk):
        # Its events alone: not the attempts and dependencies the job's own answer reads.
        job = get_object_or_404(access.visible_jobs(request.user).only("tenant_id"), pk=pk)
        events, earlier = job.events.all(), False
        if (last := request.query_params.get("last")) is not None:
            count = whole_number(last)
            if count is None or not 1 <= count <= MAX_EVENTS:
                raise ValidationError({"last": f"A number of events from 1 to {MAX_EVENTS}."})
            newest = list(job.events.order_by("-time", "-id")[: count + 1])
            events, earlier = newest[:count][::-1], len(newest) > count
        answer = EventSerializer(events, many=True).data
        if access.is_outsider(request.user, job):
            for event in answer:
                event["reason"] = access.outsiders_reason(event["reason"])
        return Response({"events": answer, "earlier": earlier})


class LogsView(APIView):
    """Log lines in order; `after` (the last id seen) pages through them and lets a client
    follow a running job by polling. `last=N` (at most MAX_TAIL) gives the last N lines after
    `after` instead of the first, and `earlier`, whether lines between were left out: a page
    opened on a log of millions of lines reads its end, not every page before it. `worker`
    and `attempt` keep one worker's lines (by rank) and one attempt's (by number), `grep`
    the lines holding its text, in any case (`last`, `earlier` and the pages count those)."""

    def get(self, request, pk):
        # Polled every second while followed: the job's workers alone, not what its answer
        # reads (attempts with their nodes, dependencies, why it ended).
        job = get_object_or_404(access.visible_jobs(request.user).only("workers"), pk=pk)
        source = log_source(request, job)
        after = id_param(request, "after") or 0
        last = request.query_params.get("last")
        tail = None if last is None else whole_number(last)
        if last is not None and (tail is None or not 1 <= tail <= MAX_TAIL):
            raise ValidationError({"last": f"A number of lines from 1 to {MAX_TAIL}."})
        # A narrowed read scans the log up to its last line stored now, matching or not: the
        # next poll goes on from there, not from the last match (a text nothing holds would
        # have every poll read the whole log again).
        scanned = source.last_stored(after) if source.narrowed else None
        lines = job_lines(source, after, tail or PAGE_LINES, newest=tail is not None,
                          upto=scanned)  # fmt: skip
        whole = tail is not None or len(lines) < PAGE_LINES
        next_after = scanned if scanned and whole else (lines[-1].pk if lines else after)
        answer = {"lines": LogLineSerializer(lines, many=True).data, "next": next_after}
        if tail is not None:
            answer["earlier"] = bool(lines) and job_lines(source, after, 1)[0].pk < lines[0].pk
        return Response(answer)


class LogDownloadView(APIView):
    """The job's whole output as one text file, streamed as it is read, LOG_BATCH rows at a
    time: a job's log may be millions of lines."""

    def perform_content_negotiation(self, request, force=False):
        # Whatever the client accepts (text/plain is no renderer of the API's): errors in JSON.
        return super().perform_content_negotiation(request, force=True)

    def get(self, request, pk):
        job = get_object_or_404(access.visible_jobs(request.user), pk=pk)
        source = log_source(request, job)
        text = log_text(source)
        if isinstance(request._request, ASGIRequest):
            # Under ASGI (daphne) Django reads a sync iterator to its end, into a list, before
            # it sends a byte: hand it an async one, each batch read in Django's sync thread.
            text = stepped(text)
        response = StreamingHttpResponse(text, content_type="text/plain; charset=utf-8")
        name = f"job-{job.pk}{source.suffix}.log"
        response["Content-Disposition"] = content_disposition_header(True, name)
        return response


@dataclass(frozen=True)
class LogSource:
    """The lines a log read keeps: its job's attempts' (or one of them), every worker's or one
    worker's; `ranked`, whether a line written out says its worker's rank."""

    attempts: list[int]
    worker: int | None
    ranked: bool
    suffix: str  # a download's name after the job's: "-attempt-2-rank-3"
    grep: str = ""  # only the lines holding it, in any case ("": every line)

    @property
    def narrowed(self) -> bool:
        """Whether it keeps some of its attempts' lines alone (one worker's, or a text's)."""
        return self.worker is not None or bool(self.grep)

    def lines(self):
        lines = LogChunk.objects.filter(attempt_id__in=self.attempts)
        if self.worker is not None:
            lines = lines.filter(worker=self.worker)
        return lines.filter(text__icontains=self.grep) if self.grep else lines

    def last_stored(self, after: int) -> int | None:
        """The id of its attempts' last line stored after `after`, whichever it keeps (None:
        none): one step back along the (attempt, id) index per attempt."""
        lines = LogChunk.objects.filter(attempt_id__in=self.attempts, pk__gt=after)
        return lines.aggregate(last=Max("pk"))["last"]

    def holds(self, line: str) -> bool:
        """Whether a line of a stored chunk (which may hold several) is one the read keeps."""
        return self.grep.lower() in line.lower()


def log_source(request, job: Job) -> LogSource:
    """The log a read asks for: `?attempt=` (an attempt's number), `?worker=` (a rank, 0 to
    the job's workers less one) and `?grep=` (text its lines hold, in any case, at most
    MAX_GREP characters; empty: every line), each a 400 naming it otherwise."""
    # The job's attempt ids first: a join would have PostgreSQL walk every later line stored.
    attempts = job.attempts.all()
    suffix = ""
    if (number := id_param(request, "attempt", "An attempt's number")) is not None:
        attempts, suffix = attempts.filter(number=number), f"-attempt-{number}"
    worker = id_param(request, "worker", "A worker's rank")
    if worker is not None:
        if worker >= job.workers:
            ranks = "0" if job.workers == 1 else f"0 to {job.workers - 1}"
            raise ValidationError({"worker": f"A worker's rank: {ranks}."})
        suffix += f"-rank-{worker}"
    grep = request.query_params.get("grep", "")
    if len(grep) > MAX_GREP:
        raise ValidationError({"grep": f"At most {MAX_GREP} characters."})
    if grep:
        suffix += "-grep"
    ids = list(attempts.values_list("pk", flat=True))
    return LogSource(ids, worker, job.workers > 1 and worker is None, suffix, grep)


def log_text(source: LogSource):
    """The log's lines, a piece per LOG_BATCH rows read in id order (the order of the logs
    endpoint); with more than one worker, each line starts with its worker's rank."""
    after = 0
    while True:
        rows = list(
            source.lines()
            .filter(pk__gt=after)
            .order_by("pk")
            .values_list("pk", "worker", "text")[:LOG_BATCH]
        )
        if rows:
            yield "".join(as_lines(worker, text, source) for _, worker, text in rows)
        if len(rows) < LOG_BATCH:
            return
        after = rows[-1][0]


def as_lines(worker: int, text: str, source: LogSource) -> str:
    # A stored chunk may hold several lines: each the read keeps gets the rank, and the chunk
    # ends its line.
    prefix = f"[rank {worker}] " if source.ranked else ""
    lines = text.removesuffix("\n").split("\n")
    return "".join(f"{prefix}{line}\n" for line in lines if source.holds(line))


async def stepped(pieces):
    """A sync iterator as an async one, stepped in Django's sync thread (its database
    connection), one piece at a time."""
    step = sync_to_async(next)
    while (piece := await step(pieces, None)) is not None:
        yield piece


def id_param(request, name: str, what: str = "An id") -> int | None:
    """A query parameter holding an id, or another whole number (`what`, in the error); a 400
    naming it if it is not a whole number. A number past the largest id a job can have stands
    for that largest, as no job lies between them (a database may refuse to compare an id with
    a larger number: SQLite does)."""
    errors: dict[str, str] = {}
    number = listing.number(request.query_params, name, what, errors)
    if errors:
        raise ValidationError(errors)
    return number


PAGE_LINES = 1000  # the lines a read from `after` gives at most


def job_lines(
    source: LogSource, after: int, limit: int = PAGE_LINES, *, newest: bool = False, upto=None
):
    """The log's first `limit` lines after the id `after` (to the id `upto`, if given), in
    order; its last ones if `newest`."""
    lines = source.lines().filter(pk__gt=after).select_related("attempt")
    if upto is not None:
        lines = lines.filter(pk__lte=upto)
    if newest:
        return list(lines.order_by("-pk")[:limit])[::-1]
    return list(lines.order_by("pk")[:limit])


urlpatterns = [
    path("jobs/", JobsView.as_view(), name="api-jobs"),
    path("jobs/test/", SubmitTestOnlyView.as_view(), name="api-jobs-test"),
    path("jobs/<int:pk>/", JobView.as_view(), name="api-job"),
    path("jobs/cancel/", CancelJobsView.as_view(), name="api-jobs-cancel"),
    path("jobs/<int:pk>/cancel/", CancelView.as_view(), name="api-job-cancel"),
    path("jobs/<int:pk>/hold/", HoldView.as_view(), name="api-job-hold"),
    path(
        "jobs/<int:pk>/release/",
        HoldView.as_view(verb=actions.release_hold),
        name="api-job-release",
    ),
    path("jobs/<int:pk>/requeue/", RequeueView.as_view(), name="api-job-requeue"),
    path("jobs/<int:pk>/priority/", PriorityView.as_view(), name="api-job-priority"),
    path("jobs/<int:pk>/shard-limit/", ShardLimitView.as_view(), name="api-job-shard-limit"),
    path("jobs/<int:pk>/min-workers/", MinWorkersView.as_view(), name="api-job-min-workers"),
    path("jobs/<int:pk>/runtime-limit/", RuntimeLimitView.as_view(), name="api-job-runtime-limit"),
    path("jobs/<int:pk>/request/", RequestView.as_view(), name="api-job-request"),
    path("jobs/<int:pk>/constraints/", ConstraintsView.as_view(), name="api-job-constraints"),
    path("jobs/<int:pk>/dependencies/", DependenciesView.as_view(), name="api-job-dependencies"),
    path("jobs/<int:pk>/labels/", LabelsView.as_view(), name="api-job-labels"),
    path("jobs/<int:pk>/notifications/", NotificationsView.as_view(), name="api-job-notifications"),
    path("jobs/<int:pk>/retries/", RetriesView.as_view(), name="api-job-retries"),
    path("jobs/<int:pk>/resubmit/", ResubmitView.as_view(), name="api-job-resubmit"),
    path("jobs/<int:pk>/spec/", SpecView.as_view(), name="api-job-spec"),
    path("jobs/<int:pk>/events/", EventsView.as_view(), name="api-job-events"),
    path("jobs/<int:pk>/logs/", LogsView.as_view(), name="api-job-logs"),
    path("jobs/<int:pk>/logs.txt", LogDownloadView.as_view(), name="api-job-log-download"),
    path("queue/", QueueView.as_view(), name="api-queue"),
    path("usage/", UsageView.as_view(), name="api-usage"),
    path("usage/daily/", DailyUsageView.as_view(), name="api-usage-daily"),
    path("maintenance/", MaintenanceView.as_view(), name="api-maintenance"),
    path("maintenance/<int:pk>/", WindowView.as_view(), name="api-maintenance-window"),
    path("bookings/<int:pk>/", WindowView.as_view(model=Booking), name="api-booking"),
    path("bookings/", BookingsView.as_view(), name="api-bookings"),
    path("clusters/", ClustersView.as_view(), name="api-clusters"),
    path("nodes/", NodesView.as_view(), name="api-nodes"),
    *(
        path(
            f"nodes/<cluster>/<node>/{verb}/",
            NodeServiceView.as_view(verb=verb),
            name=f"api-node-{verb}",
        )
        for verb in NODE_VERBS
    ),  # fmt: skip
]
