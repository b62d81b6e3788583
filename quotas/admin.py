from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.widgets import AutocompleteSelect
from django.contrib.auth import admin as auth_admin
from django.contrib.auth.models import Group, User
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db.models import Count
from django.db.models.constants import LOOKUP_SEP
from django.forms.models import BaseInlineFormSet

from clusters.models import Node
from jobs import standing
from jobs.admin import BigTable, ReadOnlyAdmin, noted
from jobs.cli.client import ordinal
from jobs.placement.words import counted
from quotas import (
    provisions_admin,  # noqa: F401 (registers the secrets' and volumes' admins)
    tokens,
)
from quotas.admin_scope import (
    BulkActions,
    InlinesCapped,
    LookupsChecked,
    PlatformAdminsAlone,
    PlatformOnly,
    TenantScoped,
)
from quotas.models import (
    ApiToken,
    Membership,
    PriorityClass,
    Quota,
    Rate,
    ScimGroup,
    SignIn,
    Tenant,
    new_notify_secret,
    utc_today,
)
from quotas.status import unit
from quotas.usage import usage_by_tenant


class Drawn(forms.ModelForm):
    """A row's form that says what the row was when its page was drawn (`drawn`, hidden: those
    of its `drawn_fields` the form writes), so that of two admins editing one row, the one who
    saves second is told the row changed since, rather than silently writing over the first
    one's change (Django's admin saves every field of the row it read at the save, and has no
    such check)."""

    drawn_fields: tuple[str, ...] = ()
    what = "row"
    drawn = forms.CharField(widget=forms.HiddenInput, required=False, strip=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["drawn"].initial = self.as_drawn(self.instance)

    def as_drawn(self, row) -> str:
        # Only what this form writes: a tenant admin's save of the members does not write the
        # fields only platform admins may change, so a change to those is no reason to refuse.
        written = [name for name in self.drawn_fields if name in self.fields]
        return ", ".join(f"{name} {getattr(row, name)!s}" for name in written)

    def changed_since(self) -> str:
        """Once the row's tenant is locked (the caller's): why saving this form would write
        over a change made since the page was drawn, or over a row deleted since ("" if
        neither). The fields the form does not write are taken as stored now, so the save
        keeps another admin's change to them."""
        if self.instance.pk is None:
            return ""
        stored = type(self.instance).objects.filter(pk=self.instance.pk).first()
        if stored is not None:
            self.keep_unwritten(stored)
        drawn = self.cleaned_data.get("drawn")
        now = self.as_drawn(stored) if stored else "deleted"
        if not drawn or now == drawn:
            return ""
        return (
            f"This {self.what} was changed by someone else since the page was drawn (it is "
            f"now: {now}): reload the page to see it, then make your change again."
        )

    def keep_unwritten(self, stored) -> None:
        """Take the row's fields this form does not write as `stored` (read under the lock):
        the row was read before the lock was taken, and the save writes every field."""
        for field in self.instance._meta.concrete_fields:
            if not field.primary_key and field.name not in self.fields:
                setattr(self.instance, field.attname, getattr(stored, field.attname))

    def check_unchanged(self) -> None:
        """changed_since, as an error of the form."""
        if problem := self.changed_since():
            self.add_error(None, problem)


class DrawnQuota(Drawn):
    drawn_fields = ("flavor", "guaranteed", "borrow_limit", "lend_limit")
    what = "quota"


class TenantForm(Drawn):
    """The tenant's own fields: of two admins saving one tenant, the second is told it changed
    since its page was drawn (its quota rows are checked on their own, DrawnQuota)."""

    drawn_fields = ("name", "slug", "fair_share_weight", "cohort", "max_queued_jobs",
                    "max_gpus_per_user", "gpu_hours_per_month", "spend_alert_per_month",
                    "gpu_idle_limit_min", "allowed_images", "notify_url", "notify_format",
                    "placements_paused", "exclusive_allowed", "owner_groups",
                    "member_groups", "viewer_groups")  # fmt: skip
    what = "tenant"

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk is not None:
            # Held until the admin's save (one transaction) commits, as QuotaFormSet holds it.
            list(Tenant.objects.select_for_update(no_key=True).filter(pk=self.instance.pk))
            self.check_unchanged()
        return cleaned


class QuotaFormSet(BaseInlineFormSet):
    """A tenant's quota rows, checked against the rows stored now as well as against each
    other: the database keeps one quota per tenant and flavor, and a row taking the flavor of
    another stored row (one another admin added since the page was drawn, or one a row of
    this form gives up in the same save: Django saves the rows in turn) would otherwise break
    that rule on save, a 500."""

    def clean(self):
        super().clean()
        if self.instance.pk is None:
            return
        # The admin saves in one transaction: two admins saving one tenant take turns here,
        # and the later one sees the rows the earlier one added.
        list(Tenant.objects.select_for_update(no_key=True).filter(pk=self.instance.pk))
        deleted = [form for form in self.forms if self._should_delete_form(form)]
        # Django ignores the errors of a form to delete: a refused deletion is the set's error.
        refused = [problem for form in deleted if (problem := form.changed_since())]
        for form in self.forms:
            if form.has_changed() and form not in deleted:
                form.check_unchanged()
        stored = dict(self.instance.quotas.values_list("flavor", "pk"))
        gone = {form.instance.pk for form in deleted}
        for form in self.forms:
            flavor = form.cleaned_data.get("flavor")
            holder = stored.get(flavor)
            if form in deleted or holder in (None, form.instance.pk):
                continue
            if holder in gone and form.instance.pk is None:
                continue  # new rows are saved after the deletions
            form.add_error(
                "flavor",
                f"This tenant has a quota on {flavor} already: change that one, or delete it "
                "and save first.",
            )
        if refused:
            raise ValidationError(refused)


class QuotaInline(PlatformOnly, admin.TabularInline):
    model = Quota
    form = DrawnQuota
    formset = QuotaFormSet
    extra = 1
    fields = ["flavor", "guaranteed", "borrow_limit", "lend_limit", "in_use", "drawn"]
    readonly_fields = ["in_use"]

    def get_queryset(self, request):
        # Each row is labelled with its tenant's name: read with it, not once per quota.
        return super().get_queryset(request).select_related("tenant")

    @admin.display(description="in use now")
    def in_use(self, quota: Quota) -> str:
        if quota.pk is None:
            return "-"
        if quota.gpu_type and quota.gpu_type not in self._gpu_types:
            return f"no node has GPU type {quota.gpu_type!r} yet"
        # One usage query per tenant page, not one per quota row.
        usage = self._usage.get(quota.tenant_id, {})
        amount = usage.get(quota.flavor, 0)
        share = f" ({amount / quota.guaranteed:.0%} of guarantee)" if quota.guaranteed else ""
        return f"{amount:g} {quota.unit}{share}"

    def get_formset(self, request, obj=None, **kwargs):
        self._usage = usage_by_tenant([obj.pk]) if obj is not None else {}
        self._gpu_types = set(Node.objects.values_list("gpu_type", flat=True).distinct())
        return super().get_formset(request, obj, **kwargs)


class RowUserSelect(AutocompleteSelect):
    """Django's autocomplete for a membership's user, the user the row already names shown
    from the row itself: Django's own widget looks each row's user up again, one query per
    member."""

    row_user = None  # set per row by MembershipForm

    def optgroups(self, name, value, attr=None):
        user = self.row_user
        if user is None or value != [str(user.pk)]:  # a new row, or a user changed in it
            return super().optgroups(name, [text for text in value if self.is_id(text)], attr)
        options = [] if self.is_required else [self.create_option(name, "", "", False, 0)]
        label = self.choices.field.label_from_instance(user)
        options.append(self.create_option(name, user.pk, label, True, len(options)))
        return [(None, options, 0)]

    def is_id(self, text: str) -> bool:
        """Whether a user sent back (a refused form's) reads as an id: Django's widget looks
        it up as it comes, and text that is none (a tampered form) failed the query, a 500.
        One that is not is shown as no user chosen, beside the field's error."""
        try:
            self.field.remote_field.model._meta.pk.to_python(text)
        except ValidationError:
            return False
        return True


class MembershipForm(forms.ModelForm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "user" in self.fields and self.instance.user_id is not None:
            # The related-widget wrapper (its add and change links) around RowUserSelect.
            self.fields["user"].widget.widget.row_user = self.instance.user

    def save(self, commit=True):
        # A membership from a sign-on group changed by hand is the admins' from then on: its
        # user's logins leave it as it is.
        if self.changed_data:
            self.instance.from_group = ""
        return super().save(commit)


class MembershipInline(admin.TabularInline):
    model = Membership
    form = MembershipForm
    extra = 1
    autocomplete_fields = ["user"]
    fields = ["user", "role", "from_group"]
    readonly_fields = ["from_group"]

    def get_queryset(self, request):
        # Each row's label names its user and tenant: one query for all, not two per row.
        return super().get_queryset(request).select_related("user", "tenant")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs["widget"] = RowUserSelect(db_field, self.admin_site, using=kwargs.get("using"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def turns_now() -> dict:
    """The teams' fair shares and turns in the line last recorded, by tenant id ({}: none)."""
    line = standing.Line.read()
    return line.turns if line is not None else {}


@admin.register(Tenant)
class TenantAdmin(TenantScoped, BulkActions, LookupsChecked, InlinesCapped, admin.ModelAdmin):
    """A tenant admin sees the tenants they own and manages their members and how many GPUs
    each may hold (a limit inside the team's quota); the rest of a tenant (its quotas, fair
    share, cohort, its GPU-hour budget, spend alert and idle-GPU limit, the images its jobs
    may run, its job-end notifications' URL, its default priority class, a pause of its
    placements, whether its jobs may take nodes whole, the sign-on groups whose users belong to
    it) and new tenants are the platform admins'.
    The notifications' signing secret is shown to platform admins only, who hand it to the
    team's receiver."""

    form = TenantForm
    list_display = [
        "name", "slug", "fair_share_weight", "fair_share_now", "max_queued_jobs",
        "max_gpus_per_user", "spend_alert", "created"
    ]  # fmt: skip
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [QuotaInline, MembershipInline]
    actions = ["rotate_notify_secret"]
    tenant_path = "pk"

    def has_add_permission(self, request):
        return request.user.is_superuser and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_delete_permission(request, obj)

    def get_readonly_fields(self, request, obj=None):
        if request.user.is_superuser:
            # Never typed in (generated); a new tenant's is shown once it is saved.
            return ("notify_secret", "fair_share_now") if obj is not None else ()
        # The URL: an outbound request from the control plane to any address is the
        # platform's decision, as what images run is. The secret (not editable) is not shown.
        return ("name", "slug", "fair_share_weight", "fair_share_now", "cohort",
                "max_queued_jobs", "gpu_hours_per_month", "spend_alert_per_month",
                "gpu_idle_limit_min", "allowed_images", "notify_url", "notify_format",
                "default_priority_class",
                "placements_paused", "exclusive_allowed", "owner_groups",
                "member_groups", "viewer_groups")  # fmt: skip

    def get_changelist_instance(self, request):
        """The list's page, each tenant given its turn from one read of the line (a row's
        own read would ask Redis for the line's stamp once per row)."""
        listed = super().get_changelist_instance(request)
        turns = turns_now()
        for tenant in listed.result_list:
            tenant.turn = turns.get(tenant.pk)
        return listed

    @admin.display(description="fair share now")
    def fair_share_now(self, obj) -> str:
        """Its fair share and turn among the teams waiting as the last placement cycle's line
        recorded them (Slurm's sshare), what a weight is chosen by; "-" when none of its jobs
        waited then. Read from the line each process keeps, no query: once for the list's
        page (`get_changelist_instance`), once for a tenant's page."""
        turn = obj.turn if hasattr(obj, "turn") else turns_now().get(obj.pk)
        if turn is None:
            return "-"
        return f"{standing.share_of(turn)} ({ordinal(turn.turn)} of {turn.teams} teams waiting)"

    @admin.display(description="spend alert a month", ordering="spend_alert_per_month")
    def spend_alert(self, obj) -> str:
        """Its spend alert with the currency ("1,000.00 USD"), "-" for none: the amount alone,
        its field; what the month cost is the quota page's (a usage report per tenant)."""
        if obj.spend_alert_per_month is None:
            return "-"
        return f"{obj.spend_alert_per_month:,.2f} {settings.MLSCHED_CURRENCY}"

    def get_prepopulated_fields(self, request, obj=None):
        return self.prepopulated_fields if request.user.is_superuser else {}

    def lookup_allowed(self, lookup, value, request):
        # `?notify_secret__startswith=ab` keeps the tenant listed or not: guess by guess, a
        # tenant admin, who is never shown the secret, would read it out.
        if not request.user.is_superuser and lookup.split(LOOKUP_SEP)[0] == "notify_secret":
            return False
        return super().lookup_allowed(lookup, value, request)

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "notify_url":
            kwargs["assume_scheme"] = "https"  # an address typed without one: https, not http
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        from jobs import actions  # the jobs app's verbs (it loads after this one)

        if not change:
            return
        followed = actions.settings_changed(obj, form.changed_data, request.user.get_username())
        if held := followed.held:
            self.message_user(
                request,
                f"Held {counted(held, 'queued job')} of {obj.name} whose image its allowed "
                "images no longer let through: only a platform admin releases them.",
                level=messages.WARNING,
            )
        if waiting := followed.waiting_whole:
            self.message_user(
                request,
                f"{counted(waiting, 'queued exclusive job')} of {obj.name} wait until made "
                "shared; running ones run on.",
                level=messages.WARNING,
            )

    def has_rotate_permission(self, request) -> bool:
        return request.user.is_superuser

    @admin.action(
        description="Give the selected tenants a new notification secret", permissions=["rotate"]
    )
    def rotate_notify_secret(self, request, queryset):
        tenants = list(queryset)
        for tenant in tenants:
            tenant.notify_secret = new_notify_secret()
            tenant.save(update_fields=["notify_secret"])
        noted(request, tenants, "Gave it a new notification secret")
        self.message_user(
            request,
            f"Gave {counted(len(tenants), 'tenant')} a new notification secret, shown on each "
            "tenant's page: their receivers need it to check notifications from now on.",
            level=messages.SUCCESS,
        )


@admin.register(PriorityClass)
class PriorityClassAdmin(PlatformOnly, BulkActions, LookupsChecked, admin.ModelAdmin):
    list_display = ["name", "value", "may_preempt", "fair_share_preemption", "preempt_exempt_s",
                    "max_runtime_s", "default_runtime_s", "max_gpus_per_user", "max_gpus",
                    "description"]  # fmt: skip
    filter_horizontal = ["tenants"]

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if request.user.is_superuser:
            return fields
        # The tenants a class lists name other teams: a tenant admin sees only their own.
        return [name for name in fields if name != "tenants"]

    def lookup_allowed(self, lookup, value, request):
        # Nor do they filter the list through them, or through the jobs (`?tenants=<id>`: the
        # classes open to that tenant; `?job=<id>`: another team's job's class).
        if not request.user.is_superuser and through_relation(self.model, lookup):
            return False
        return super().lookup_allowed(lookup, value, request)


def through_relation(model, lookup: str) -> bool:
    """Whether a list's lookup (`tenants__id=`) starts at one of the model's relations."""
    try:
        return model._meta.get_field(lookup.split(LOOKUP_SEP)[0]).is_relation
    except FieldDoesNotExist:
        return False


class QuotaForm(DrawnQuota):
    """A quota on its own page. Two admins saving one tenant's flavor at once (here, or here and
    on the tenant page) take turns on the tenant row, as QuotaFormSet does, so the later one's
    check of the one-quota-per-flavor rule sees the row the earlier one added: a form error on
    the flavor, not a 500 from the database; and one saving over a change the other made since
    the page was drawn is told so (DrawnQuota)."""

    def clean(self):
        cleaned = super().clean()
        if tenant := cleaned.get("tenant"):
            # Held until the admin's save (one transaction) commits.
            list(Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk))
            self.check_unchanged()
        return cleaned


@admin.register(Quota)
class QuotaAdmin(TenantScoped, PlatformOnly, BulkActions, LookupsChecked, admin.ModelAdmin):
    form = QuotaForm
    list_display = ["tenant", "flavor", "unit", "guaranteed", "borrow_limit", "lend_limit"]
    list_filter = ["flavor"]
    list_select_related = ["tenant"]
    tenant_path = "tenant"

    @admin.display(description="unit")
    def unit(self, quota: Quota) -> str:
        """What the amounts count: GPUs, millicores or MiB."""
        return unit(quota.flavor)


@admin.register(Rate)
class RateAdmin(PlatformOnly, BulkActions, LookupsChecked, admin.ModelAdmin):
    """The rate card the usage reports price their hours at: platform admins alone add, change
    and delete rates (each change in the admin's history, as every admin change); tenant
    admins may look, as every user may through the API. A flavor's rates by the day each holds
    from: a new one from today (UTC) unless its day is set, a later day scheduling a change."""

    list_display = ["flavor", "since", "price", "per"]
    list_filter = ["flavor"]
    search_fields = ["flavor"]

    def get_changeform_initial_data(self, request):
        return {"since": utc_today(), **super().get_changeform_initial_data(request)}

    @admin.display(description="per")
    def per(self, rate: Rate) -> str:
        """What the price buys: "USD a GPU-hour of A100"."""
        hour = {"cpu": "core-hour", "memory": "GiB-hour"}.get(rate.flavor)
        return f"{settings.MLSCHED_CURRENCY} a {hour or 'GPU-hour of ' + rate.flavor[4:]}"


@admin.register(ApiToken)
class ApiTokenAdmin(BulkActions, LookupsChecked, admin.ModelAdmin):
    """Users' API tokens, for platform admins only: listed and revoked, never edited, and never
    shown (only a hash is stored, and that is not displayed either). A token is its user's,
    not a tenant's: tenant admins see none."""

    list_display = ["name", "user", "prefix", "read_only", "created", "last_used", "expires"]
    fields = list_display
    readonly_fields = list_display
    search_fields = ["name", "prefix", "user__username"]
    list_select_related = ["user"]
    actions = ["revoke"]

    def has_module_permission(self, request):
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_add_permission(self, request):
        return False  # users create their own, in the portal: the key is shown to them alone

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # revoked through the action, so the verb logs who did it

    def has_revoke_permission(self, request) -> bool:
        return request.user.is_superuser

    @admin.action(description="Revoke selected API tokens", permissions=["revoke"])
    def revoke(self, request, queryset):
        revoked = 0
        for token in queryset.select_related("user"):
            tokens.revoke_token(token, by=request.user)
            revoked += 1
        self.message_user(
            request, f"Revoked {counted(revoked, 'API token')}.", level=messages.SUCCESS
        )


@admin.register(SignIn)
class SignInAdmin(PlatformAdminsAlone, BigTable, ReadOnlyAdmin):
    """Sign-ins and the attempts that failed (quotas.sign_ins), for security audits: who, when,
    from where and how; for platform admins alone, never edited or deleted by hand (retention
    deletes them after MLSCHED_SIGN_IN_RETENTION_DAYS)."""

    list_display = ["at", "username", "user", "method", "succeeded", "address", "reason"]
    list_filter = ["method", "succeeded"]
    list_select_related = ["user"]
    search_fields = ["username", "address"]


@admin.register(ScimGroup)
class ScimGroupAdmin(PlatformAdminsAlone, LookupsChecked, ReadOnlyAdmin):
    """The groups the identity provider pushes over SCIM (quotas.scim_groups), with their
    members, as teams' sign-on groups, MLSCHED_AUTH_ADMIN_GROUPS and
    MLSCHED_AUTH_TENANT_ADMIN_GROUPS name them: for platform admins alone, never added, changed
    or deleted here (SCIM owns them)."""

    list_display = ["display_name", "external_id", "member_count", "modified"]
    search_fields = ["display_name", "external_id"]
    fields = ["display_name", "external_id", "created", "modified", "member_names"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(member_count=Count("members"))

    @admin.display(description="members", ordering="member_count")
    def member_count(self, group: ScimGroup) -> int:
        return group.member_count

    @admin.display(description="members")
    def member_names(self, group: ScimGroup) -> str:
        names = group.members.order_by("username").values_list("username", flat=True)
        return ", ".join(names) or "-"


# Django's own pages of the users and groups, a bulk action's selection checked as every page's
# of mlsched is (BulkActions): "Delete selected" on one that is no id was a 500. Importing
# Django's registers its pages first, whatever the order the apps' admins load in.
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class UserAdmin(BulkActions, auth_admin.UserAdmin):
    pass


@admin.register(Group)
class GroupAdmin(BulkActions, auth_admin.GroupAdmin):
    pass
