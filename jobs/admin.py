from celery import schedules
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR
from django.core.paginator import Paginator
from django.http import Http404
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html_join
from django_celery_beat import admin as beat_admin
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)
from guardian.admin import ReinforcedGuardedModelAdminMixin

from jobs import actions, events
from jobs.models import Attempt, BudgetAlert, Job, JobEvent, LogChunk
from jobs.placement.words import counted
from quotas import history
from quotas.admin_scope import (
    BulkActions,
    CheckedLookups,
    InitialChecked,
    InlinesCapped,
    PlatformAdminsAlone,
    TenantScoped,
)
from quotas.models import administered_tenants


class CappedPaginator(Paginator):
    """Counts at most CAP rows. A changelist counts its rows to number its pages, and a
    COUNT(*) over millions of events or log lines costs more than the page itself; past the
    first pages an admin filters or searches rather than pages on."""

    CAP = 10_000
    capped = False  # the count stopped at CAP: there are more (the pagination template says so)

    @cached_property
    def count(self) -> int:
        counted = self.object_list.order_by()[: self.CAP + 1].count()
        self.capped = counted > self.CAP
        return min(counted, self.CAP)


def an_id(text: str) -> str:
    """A path's id as given, or a 404: guardian's permission pages look a user or group up by
    the path's text as it comes, and one that is no number fails the query."""
    if not (text.isascii() and text.isdigit()):
        raise Http404("No such id.")
    return text


def noted(request, objects, message: str) -> None:
    """Write an admin action's change of these objects into the admin's history (each one's
    History page, the index's Recent actions), as the admin writes an edit: who, when, what."""
    history.record(request.user, objects, message)


class OlderRows(CheckedLookups):
    """A changelist whose numbered pages stop at the count's cap, and which pages on by id."""

    @property
    def older_url(self) -> str | None:
        """The rows older than this page's last, newest first (`?id__lt=`): past the cap, by
        the primary key's index, however far back; None while the count is whole, or the
        rows are sorted by another column."""
        rows = list(self.result_list)  # the page's rows, read once for the table already
        if not (self.paginator.capped and rows) or ORDER_VAR in self.params:
            return None
        return self.get_query_string({"id__lt": rows[-1].pk}, [PAGE_VAR])


class BigTable:
    """A changelist over a table that grows with every job: newest first by the primary key's
    index (the models' own orderings follow foreign keys to the jobs' creation time and sort
    the whole table), counted only up to CappedPaginator.CAP, once, and paged on past it by id
    (OlderRows)."""

    ordering = ["-id"]
    paginator = CappedPaginator
    show_full_result_count = False

    def get_changelist(self, request, **kwargs):
        return OlderRows


class AdministeredTenantFilter(admin.RelatedFieldListFilter):
    """The tenants the staff user administers, read from the tenants: listing only those with
    rows would read every job's tenant on each page."""

    def field_choices(self, field, request, model_admin):
        return [(t.pk, str(t)) for t in administered_tenants(request.user)]


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class AttemptInline(ReadOnlyInline):
    model = Attempt

    def get_queryset(self, request):
        # Each row is labelled with its job's name: read with it, not once per attempt.
        return super().get_queryset(request).select_related("cluster", "job")

    fields = ["number", "cluster", "workers", "outcome", "stop_cause", "exit_code", "reason",
              "started_at", "ended_at", "cpu_seconds", "memory_peak_mb",
              "gpu_busy_seconds"]  # fmt: skip
    readonly_fields = fields


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    fields = ["time", "from_state", "to_state", "reason"]
    readonly_fields = fields


@admin.register(Job)
class JobAdmin(
    TenantScoped, BigTable, BulkActions, InlinesCapped, ReinforcedGuardedModelAdminMixin,
    admin.ModelAdmin,
):  # fmt: skip
    """Jobs are read-mostly here: they change through the lifecycle, not through edits.

    Each job's "Object permissions" page grants guardian's view_job and cancel_job to a user or
    group outside its tenant. The reinforced mixin asks for guardian's own permissions too, not
    only change_job: a grant opens a job to another tenant.
    """

    list_display = [
        "id", "name", "tenant", "family", "state", "held", "priority_class", "created"
    ]  # fmt: skip
    # Only the tenants the user administers: a tenant admin is not shown the others' names.
    list_filter = ["state", "held", "family", ("tenant", AdministeredTenantFilter),
                   "priority_class"]  # fmt: skip
    search_fields = ["name"]
    search_help_text = "A part of the job's name (any case), or its id."
    tenant_path = "tenant"
    list_select_related = ["tenant", "priority_class"]
    inlines = [AttemptInline, JobEventInline]
    actions = ["cancel_jobs", "hold_jobs", "release_jobs", "requeue_jobs"]

    def get_search_results(self, request, queryset, search_term):
        """Names holding the text, through the trigram index job_name_trgm; a whole number
        also finds the job with that id. ("id" among the search fields would compare ids as
        text, `UPPER(id::text) LIKE '%...%'`, which no index serves: OR'd with the name's
        condition, it made every search read the whole jobs table.)"""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term.isascii() and term.isdigit() and len(term) <= 18:  # within a bigint
            found |= queryset.filter(pk=int(term))
        return found, duplicates

    def obj_perms_manage_user_view(self, request, object_pk, user_id):
        return super().obj_perms_manage_user_view(request, object_pk, an_id(user_id))

    def obj_perms_manage_group_view(self, request, object_pk, group_id):
        return super().obj_perms_manage_group_view(request, object_pk, an_id(group_id))

    def get_readonly_fields(self, request, obj=None):
        # The dependencies too: a form leaves out a relation with a model of its own.
        return [f.name for f in Job._meta.fields] + ["dependencies"]

    @admin.display(description="Depends on")
    def dependencies(self, job: Job):
        """Each job it waits for (a batch: its first shard), with the dependency's kind."""
        links = job.dependency_links.select_related("on").order_by("on_id")
        return format_html_join(
            ", ",
            '{} <a href="{}">{}</a>',
            ((link.kind, reverse("admin:jobs_job_change", args=[link.on_id]), link.on)
             for link in links),
        ) or "-"  # fmt: skip

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # A deleted job takes its attempts and allocations with it: a running worker's GPUs
        # would look free to the scheduler. Jobs end by cancel; their records are the history.
        return False

    def has_cancel_permission(self, request) -> bool:
        """The cancel action is for staff holding the global cancel_job permission."""
        return request.user.has_perm("jobs.cancel_job")

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request, queryset):
        with events.coalesced():  # one live message per tenant, however many jobs
            canceled = sum(
                actions.cancel(job, f"canceled by {request.user}") is not None for job in queryset
            )
        self.message_user(request, f"Canceled {counted(canceled, 'job')}.", level=messages.SUCCESS)

    @admin.action(description="Hold selected queued jobs", permissions=["cancel"])
    def hold_jobs(self, request, queryset):
        """A platform admin's hold, which only a platform admin releases; a tenant admin's is
        their team's own."""
        self._each(request, queryset, actions.hold, "Held")

    @admin.action(description="Release selected held jobs", permissions=["cancel"])
    def release_jobs(self, request, queryset):
        self._each(request, queryset, actions.release_hold, "Released")

    @admin.action(description="Requeue selected running jobs", permissions=["cancel"])
    def requeue_jobs(self, request, queryset):
        """Stop them as a preemption does and queue them again without using a retry."""
        self._each(request, queryset, actions.requeue, "Asked to stop and requeue")

    def _each(self, request, queryset, verb, done: str) -> None:
        count, refused = 0, []
        with events.coalesced():
            for job in queryset.order_by("id"):
                try:
                    count += verb(job, str(request.user), admin=request.user.is_superuser)
                except (actions.HoldRefused, actions.RequeueRefused) as refusal:
                    refused.append(str(refusal))
        self.message_user(request, f"{done} {counted(count, 'job')}.", level=messages.SUCCESS)
        for message in refused[:10]:
            self.message_user(request, message, level=messages.WARNING)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records written by the lifecycle: browsable, never edited or deleted by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Attempt)
class AttemptAdmin(TenantScoped, BigTable, ReadOnlyAdmin):
    list_display = [
        "job", "number", "cluster", "workers", "outcome", "exit_code", "started_at", "ended_at"
    ]  # fmt: skip
    list_filter = ["outcome", "stop_cause", "cluster"]
    list_select_related = ["job", "cluster"]


@admin.register(JobEvent)
class JobEventAdmin(TenantScoped, BigTable, ReadOnlyAdmin):
    list_display = ["time", "job", "from_state", "to_state", "reason"]
    list_filter = ["to_state"]
    list_select_related = ["job"]


@admin.register(LogChunk)
class LogChunkAdmin(TenantScoped, BigTable, ReadOnlyAdmin):
    tenant_path = "attempt__job__tenant"
    list_display = ["attempt", "worker", "seq", "stream", "created"]
    list_select_related = ["attempt__job"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(TenantScoped, ReadOnlyAdmin):
    """The thresholds of GPU-hour budgets and spend alerts each tenant was told of
    (jobs.budget_alerts), with the figures they were told with (GPU-hours, or money)."""

    tenant_path = "tenant"
    list_display = ["tenant", "month", "kind", "percent", "budget_gpu_hours", "spent_gpu_hours",
                    "budget_spend", "spent_spend", "sent_at"]  # fmt: skip
    list_filter = ["month", "kind", "percent"]
    list_select_related = ["tenant"]


@admin.register(LogEntry)
class HistoryAdmin(PlatformAdminsAlone, BigTable, ReadOnlyAdmin):
    """The platform's history (quotas.history): who changed how the platform is set up, when
    and what, through the admin, the API, the portal or the sign-on groups; for platform
    admins alone (a tenant admin's own rows are on each object's History page). Retention
    deletes its entries after MLSCHED_HISTORY_RETENTION_DAYS."""

    list_display = ["action_time", "user", "action", "content_type", "object_repr", "message"]
    list_filter = ["action_flag", "content_type"]
    list_select_related = ["user", "content_type"]
    search_fields = ["object_repr", "change_message", "user__username"]

    @admin.display(description="action", ordering="action_flag")
    def action(self, entry) -> str:
        return history.ACTIONS.get(entry.action_flag, "")

    @admin.display(description="what")
    def message(self, entry) -> str:
        return entry.get_change_message()


# django-celery-beat's pages of the beat scheduler's periodic tasks and schedules, their bulk
# actions' selections checked as every page's of mlsched is (BulkActions: "Delete
# selected" or "Run selected tasks" on one that is no id was a 500), and dates from an add
# page's address read as dates (InitialChecked). Importing the package's admin registers its
# pages first, whatever the order the apps' admins load in.
admin.site.unregister([PeriodicTask, CrontabSchedule, ClockedSchedule, SolarSchedule,
                       IntervalSchedule])  # fmt: skip


class PeriodicTaskForm(beat_admin.PeriodicTaskForm):
    """The package's periodic task form, where a task name past its field's 200 characters is
    that field's error (the package's check read the name the field had refused: a 500), and
    message headers left empty are none, `{}`: the package stores empty ones as NULL, which
    their column refuses (a 500). Other headers are JSON, as the arguments are."""

    def clean(self):
        if self.has_error("task"):
            return self.cleaned_data
        return super().clean()

    def clean_headers(self):
        if not self.cleaned_data["headers"]:
            return "{}"
        return self._clean_json("headers")


class PeriodicTaskInline(beat_admin.PeriodicTaskInline):
    """The package's rows of a schedule's periodic tasks, each read with its schedule: a row is
    labelled with it (the package read it once per task)."""

    def get_queryset(self, request):
        schedules = ["interval", "crontab", "solar", "clocked"]
        return super().get_queryset(request).select_related(*schedules)


class CrontabScheduleForm(forms.ModelForm):
    """A crontab schedule, each of its fields read as the beat scheduler reads it (celery's
    crontab): one it cannot read is that field's error before Django puts it on the row. The
    package's own check refused "-1" only once it was there, and the refused page, saying the
    row's schedule in words, failed on it (celery raises what the package does not catch: a
    500). Its time zone is compared with the stored one, not with a copy the page sent back (a
    name too long for a file name failed that comparison: a 500)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["timezone"].show_hidden_initial = False

    def clean(self):
        cleaned = super().clean()
        for name in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week"):
            if name not in cleaned:
                continue
            try:
                schedules.crontab(**{name: cleaned[name]})
            except (ValueError, schedules.ParseException) as refused:
                self.add_error(name, f"The beat scheduler cannot read it: {str(refused)[:100]}.")
        return cleaned


@admin.register(PeriodicTask)
class PeriodicTaskAdmin(BulkActions, InitialChecked, beat_admin.PeriodicTaskAdmin):
    form = PeriodicTaskForm


@admin.register(CrontabSchedule)
class CrontabScheduleAdmin(BulkActions, InlinesCapped, beat_admin.CrontabScheduleAdmin):
    form = CrontabScheduleForm
    inlines = [PeriodicTaskInline]


@admin.register(ClockedSchedule)
class ClockedScheduleAdmin(
    BulkActions, InitialChecked, InlinesCapped, beat_admin.ClockedScheduleAdmin
):
    inlines = [PeriodicTaskInline]


@admin.register(SolarSchedule)
class SolarScheduleAdmin(BulkActions, InlinesCapped, beat_admin.SolarScheduleAdmin):
    inlines = [PeriodicTaskInline]


@admin.register(IntervalSchedule)
class IntervalScheduleAdmin(BulkActions, InlinesCapped, beat_admin.IntervalScheduleAdmin):
    inlines = [PeriodicTaskInline]
