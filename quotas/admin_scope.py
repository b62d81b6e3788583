"""What every admin page of mlsched shares: rows scoped to the tenants a staff user
administers, changes kept to platform admins, bulk selections, typed lookups and an add page's
dates from its address checked so bad ones are refused rather than failing, inline rows built
only up to what the page holds, deletions a verb refuses while jobs use the row, and the model
permissions a tenant admin's pages use."""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.db import DataError, models, transaction
from django.db.models import Q
from django.http import HttpResponseRedirect
from django.urls import reverse

from jobs import retrying
from jobs.placement.words import counted
from quotas.models import administered_tenants
from quotas.tenant_secrets import InUse

# The model permissions a tenant admin's pages use, page by page: what TenantScoped, PlatformOnly
# and each page's own checks let a tenant admin do with them (the auth group "tenant admins",
# quotas.sign_on.TENANT_ADMINS, is made with these). Not here: the job's change (its page is
# read-only; its "Object permissions" page also asks for guardian's own permissions, a platform
# admin's); the users' (the User admin lists every account, and so would the search of a new
# member row's user, which asks for auth.view_user: a tenant admin adds a member on the
# portal's Teams page); and the pages platform admins alone read or change (tokens, sign-ins,
# the history, SCIM's groups, periodic tasks).
TENANT_ADMIN_PERMISSIONS = (
    # Their tenants: the members (inline) and how many GPUs each may hold; the rest looked at.
    "quotas.view_tenant", "quotas.change_tenant",
    "quotas.view_membership", "quotas.add_membership", "quotas.change_membership",
    "quotas.delete_membership",
    "quotas.view_quota", "quotas.view_priorityclass", "quotas.view_rate",
    # Their tenants' secrets, set and deleted; their data volumes, looked at.
    "quotas.view_tenantsecret", "quotas.add_tenantsecret", "quotas.change_tenantsecret",
    "quotas.delete_tenantsecret", "quotas.view_tenantvolume",
    # Their tenants' jobs and records; cancel, hold, release and requeue (the job list's actions).
    "jobs.view_job", "jobs.cancel_job", "jobs.view_attempt", "jobs.view_jobevent",
    "jobs.view_logchunk", "jobs.view_budgetalert",
    # The clusters and nodes every tenant's work runs on, looked at; their bookings, allocations.
    "clusters.view_cluster", "clusters.view_node", "clusters.view_maintenancewindow",
    "clusters.view_booking", "clusters.view_allocation",
)  # fmt: skip


def tenant_admin_permissions():
    """TENANT_ADMIN_PERMISSIONS' rows."""
    named = Q(pk__in=[])  # none named, none (an empty Q would be every permission)
    for name in TENANT_ADMIN_PERMISSIONS:
        app_label, codename = name.split(".")
        named |= Q(content_type__app_label=app_label, codename=codename)
    return Permission.objects.filter(named)


class TenantScoped:
    """Rows of the tenants the staff user administers only (every tenant for a superuser): a
    tenant admin's model permissions reach their own tenants and their records, no others."""

    tenant_path = "job__tenant"

    def get_queryset(self, request):
        rows = super().get_queryset(request)
        if request.user.is_superuser:
            return rows
        return rows.filter(**{f"{self.tenant_path}__in": administered_tenants(request.user)})


class PlatformOnly:
    """What a tenant could use to give itself more (quotas, fair share, who may preempt, the
    clusters and nodes every tenant's work runs on) is changed by platform admins (superusers)
    only; tenant admins may look."""

    def has_add_permission(self, request, *args):
        return request.user.is_superuser and super().has_add_permission(request, *args)

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_delete_permission(request, obj)


class PlatformAdminsAlone:
    """What platform admins (superusers) alone read: the platform's history, its sign-ins;
    tenant admins neither see nor open it."""

    def has_module_permission(self, request):
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser


class BulkActions:
    """A list's bulk actions, each run in one transaction (run again after a deadlock), and
    their selection checked first.

    Django runs an action outside any transaction: its deletion wrote the history's entries
    before deleting, an action of mlsched its change before its entry, each in its own, so an
    action that lost the database between them left one without the other. Django takes the
    posted values as ids as they come, and one that is no id (a tampered form) fails the query
    (a 500): such a selection runs nothing and is answered as an empty one is."""

    def response_action(self, request, queryset):
        pk = self.model._meta.pk
        try:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                pk.to_python(value)
        except ValidationError:
            self.message_user(request, "The selection names no rows.", level=messages.ERROR)
            return None  # Django redirects back to the list
        # Run again if the database aborts it to break a deadlock, as the verbs it calls would
        # be on their own (jobs.retrying: inside a transaction they leave that to its owner).
        return retrying.atomic(super().response_action)(request, queryset)


class InlinesCapped:
    """An admin page's inline rows built from a sent form only up to what the page can hold:
    the rows it shows and NEW_ROWS more. Django builds as many row forms as the form's
    TOTAL_FORMS says, up to 2,000 (ten seconds' work for one request); past the cap the save is
    refused as Django refuses too many forms ("Please submit at most ..."), none built past it.
    The page's "Add another" stops at the cap too."""

    NEW_ROWS = 20  # rows added in one save

    def get_formsets_with_inlines(self, request, obj=None):
        for formset, inline in super().get_formsets_with_inlines(request, obj):
            shown = 0
            if obj is not None:
                shown = inline.get_queryset(request).filter(**{formset.fk.name: obj}).count()
            most = shown + self.NEW_ROWS
            capped = {"absolute_max": most, "max_num": min(formset.max_num, most)}
            yield type(formset.__name__, (formset,), capped), inline


class CheckedLookups(ChangeList):
    """A changelist whose lookups typed into the URL (Django takes any on the model's own
    fields: `?name__regex=`, `?created__year=`) are a bad parameter, as Django answers one it
    cannot parse (back to the list, `?e=1`), where Django or the database cannot run them: an
    unbalanced regular expression, a year past 9999. Not a 500. The rows are counted first,
    under the page's own filter: what fails, fails there."""

    def get_results(self, request):
        try:
            with transaction.atomic():  # a savepoint: the connection stays usable after it
                super().get_results(request)
        except (DataError, ValueError, OverflowError) as refused:
            raise IncorrectLookupParameters(refused) from refused


class LookupsChecked:
    """The admin's list as CheckedLookups."""

    def get_changelist(self, request, **kwargs):
        return CheckedLookups


class InitialChecked:
    """An add page's date-and-time fields filled from its address (`?starts_at=2026-05-01
    10:00`) only with what reads as a date and time: Django hands the text as it comes to the
    field's two boxes, which split only a date and time (any text was a 500). Text that is
    none is left out: the page is drawn without it."""

    def get_changeform_initial_data(self, request):
        initial = super().get_changeform_initial_data(request)
        for field in self.model._meta.fields:
            if isinstance(field, models.DateTimeField) and field.name in initial:
                try:
                    initial[field.name] = forms.DateTimeField().clean(initial[field.name])
                except ValidationError:
                    del initial[field.name]
        return initial


class RefusedWhileInUse:
    """A tenant's row (a secret, a data volume) deleted through its verb (`delete_row`), which
    refuses it while jobs not yet ended use it (InUse): on the row's page and row by row in the
    bulk action, the admin is told which jobs, and nothing of a refused row is deleted or
    logged."""

    noun = "row"  # as the bulk action's message counts them

    def delete_row(self, obj) -> None:
        raise NotImplementedError

    def delete_model(self, request, obj):
        self.delete_row(obj)  # InUse: refused, see delete_view

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except InUse as in_use:
            # Out of Django's transaction: the deletion it logged is rolled back with it.
            self.message_user(request, f"Not deleted. {in_use}", level=messages.ERROR)
            opts = self.opts
            page = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[object_id])
            return HttpResponseRedirect(page)

    @admin.action(permissions=["delete"], description=django_delete_selected.short_description)
    def delete_selected(self, request, queryset):
        """Django's action, each row deleted through the verb: those jobs not yet ended use are
        kept, and the admin is told which jobs."""
        if not request.POST.get("post"):
            return django_delete_selected(self, request, queryset)  # its confirmation page
        deleted = []
        for row in queryset.select_related("tenant"):
            try:
                with transaction.atomic():  # each under its tenant's lock, held to its deletion
                    self.delete_row(row)
            except InUse as in_use:
                self.message_user(request, f"{row} not deleted. {in_use}", messages.ERROR)
            else:
                deleted.append(row)
        if deleted:
            self.log_deletions(request, deleted)
            deleted_rows = counted(len(deleted), self.noun)
            self.message_user(request, f"Deleted {deleted_rows}.", messages.SUCCESS)
        return None
