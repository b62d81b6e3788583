import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Count, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.forms.fields import InvalidJSONInput
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html, format_html_join

from clusters.backends.base import SPEC_FIELDS
from clusters.models import Allocation, Booking, Cluster, MaintenanceWindow, Node, validate_topology
from clusters.window_forms import BookingForm, MaintenanceWindowForm
from jobs import actions, janitor
from jobs.admin import AdministeredTenantFilter, BigTable, ReadOnlyAdmin, noted
from jobs.maintenance_api import nodes_named, with_status
from jobs.placement.model import gpu_flavor
from jobs.placement.words import counted
from quotas.admin_scope import (
    BulkActions,
    InitialChecked,
    LookupsChecked,
    PlatformOnly,
    TenantScoped,
)
from quotas.models import Quota


def unstorable(value) -> str:
    """Why parsed JSON can be neither stored nor shown, "" if it can: a lone surrogate (typed
    as an escape, `\\ud800`), which PostgreSQL's jsonb refuses and no UTF-8 page can print."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return "Text may not hold lone surrogates (\\ud800 to \\udfff)."
    except RecursionError:
        return "Nested too deep."
    return ""


class JsonText(forms.JSONField):
    """Django's JSON form field (cluster labels, node topology and features), where JSON that
    Python or the database cannot take is a form error, shown back as typed, not a 500: Django
    catches only a syntax error, not JSON nested past the parser's depth or a lone surrogate.
    A box left empty is `empty` (the column's default: no labels, no features), not a NULL the
    column refuses. What Django takes for empty and so checks with none of the column's checks
    (`shape`) is checked here when typed in: `null` where the column takes no NULL, and `[]`,
    `{}` or `""` of the wrong kind are refused as other JSON of the wrong kind is ("Give a
    mapping ...", "Give a list ..."), rather than saved (`null` as an empty box)."""

    def __init__(self, *, empty=None, shape=(), **kwargs):
        super().__init__(**kwargs)
        self.empty = empty  # what makes the empty value: dict, list (None: None)
        self.shape = shape  # the column's validators

    def to_python(self, value):
        try:
            parsed = super().to_python(value)
        except RecursionError:
            raise ValidationError("Nested too deep.", code="invalid") from None
        if problem := unstorable(parsed):
            raise ValidationError(problem, code="invalid")
        if value in self.empty_values:  # the box left empty
            return self.empty() if self.empty else None
        if parsed in self.empty_values and (parsed is not None or self.empty):
            for check in self.shape:
                check(parsed)
            if parsed is None:
                raise ValidationError("Give JSON other than null.", code="invalid")
        return parsed

    def bound_data(self, data, initial):
        try:
            parsed = super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)
        return InvalidJSONInput(data) if unstorable(parsed) else parsed


class JsonTextAdmin:
    """An admin whose JSON fields are JsonText, empty as their columns' defaults."""

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if isinstance(db_field, models.JSONField):
            kwargs["form_class"] = JsonText
            kwargs["empty"] = None if db_field.null else db_field.get_default
            kwargs["shape"] = db_field.validators
        return super().formfield_for_dbfield(db_field, request, **kwargs)


@admin.register(Cluster)
class ClusterAdmin(PlatformOnly, BulkActions, LookupsChecked, JsonTextAdmin, admin.ModelAdmin):
    """The platform's clusters: a tenant admin may look, and issues no agent token (one acts as
    the cluster's agent, which reads every tenant's work placed there)."""

    list_display = ["name", "backend", "region", "placement_cost", "interruptible", "health",
                    "last_heartbeat"]  # fmt: skip
    list_filter = ["backend", "interruptible", "health"]
    readonly_fields = ["health", "last_heartbeat", "agent_release", "node_table"]
    actions = ["rotate_agent_token"]
    NODES_SHOWN = 200

    @admin.display(description="agent's release")
    def agent_release(self, cluster: Cluster) -> str:
        """What the agent's heartbeats say of the run spec it keeps, against this release's:
        work needing a field it leaves out runs elsewhere (jobs.snapshot.cluster_ids)."""
        said = cluster.agent_spec_fields
        if said is None:
            return (
                "It has not said which fields of the run spec it keeps (a release before they "
                "did): jobs naming secrets, or pulled with a team's registry credential, run "
                "elsewhere."
            )
        lacking = sorted(set(SPEC_FIELDS) - set(said))
        if not lacking:
            return "Keeps every field of this release's run spec."
        return (
            f"Leaves out {', '.join(lacking)}: work needing them runs elsewhere until the agent "
            "is upgraded."
        )

    @admin.display(description="nodes")
    def node_table(self, cluster: Cluster):
        """The cluster's nodes as one plain table, each linking to its own page (where it is
        edited). An inline form per node cost ~5 ms of rendering each: half a second for 100
        nodes. Past NODES_SHOWN, the node list, filtered on the cluster, has them all."""
        if cluster.pk is None:
            return "Nodes appear once the cluster's agent reports its inventory."
        nodes = list(cluster.nodes.order_by("name")[: self.NODES_SHOWN + 1])
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{} x {}{}</td><td>{}</td><td>{}</td>'
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            ((reverse("admin:clusters_node_change", args=[n.pk]), n.name, n.gpu_count,
              n.gpu_type or "no GPU", " (shared)" if n.gpu_shareable else "", n.cpu_milli,
              n.memory_mb, "yes" if n.schedulable else "no", "yes" if n.healthy else "no",
              n.last_seen or "-") for n in nodes[: self.NODES_SHOWN]),
        )  # fmt: skip
        listed = reverse("admin:clusters_node_changelist") + f"?cluster__id__exact={cluster.pk}"
        more = "all of them" if len(nodes) > self.NODES_SHOWN else "as a list"
        return format_html(
            "<table><thead><tr><th>name</th><th>GPUs</th><th>mCPU</th><th>MiB</th>"
            "<th>schedulable</th><th>healthy</th><th>last seen</th></tr></thead>"
            '<tbody>{}</tbody></table><p><a href="{}">The nodes, {}</a></p>',
            rows, listed, more,
        )  # fmt: skip

    # For those who may change clusters: a view permission alone must not issue (and read) one.
    @admin.action(description="Issue a new agent token (shown once)", permissions=["change"])
    def rotate_agent_token(self, request, queryset):
        # The tokens go on this answer alone, never in a message: messages wait for the next
        # page in a cookie that is signed, not encrypted.
        issued = [(cluster, cluster.rotate_token()) for cluster in queryset]
        noted(request, [cluster for cluster, _ in issued], "Issued a new agent token")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "New agent tokens",
            "issued": issued,
            "server_url": f"{request.scheme}://{request.get_host()}",
        }
        response = TemplateResponse(request, "admin/clusters/cluster/agent_tokens.html", context)
        add_never_cache_headers(response)
        return response


class Quarantined(admin.SimpleListFilter):
    title = "quarantined"
    parameter_name = "quarantined"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(quarantined_at__isnull=self.value() == "no")
        return queryset


class NodeForm(forms.ModelForm):
    """A node's topology held to the rule the agents' inventory is: labels whose every key a
    job could ask for, each value a string. A key no job could name is refused on its field,
    naming it, and nothing is saved."""

    def clean_topology(self):
        topology = self.cleaned_data["topology"]
        if topology not in self.fields["topology"].empty_values:
            validate_topology(topology)
        return topology


class NodeActionForm(ActionForm):
    """The node list's actions, with why a cordon or a drain is done (Slurm's scontrol update
    NodeName=... State=DRAIN Reason=...): users read it beside the node's state."""

    reason = forms.CharField(
        required=False, max_length=200,
        widget=forms.TextInput(attrs={"placeholder": "why (cordon, drain)", "size": 30}),
    )  # fmt: skip


@admin.register(Node)
class NodeAdmin(
    PlatformOnly, BulkActions, LookupsChecked, InitialChecked, JsonTextAdmin, admin.ModelAdmin
):
    """The platform's nodes: cordoned, drained and uncordoned by platform admins only (a drain
    stops every tenant's work there), with a reason users see (`action_form`); a tenant admin
    may look. A node the control plane quarantined (jobs.quarantine) says why; uncordoning it
    ends the quarantine."""

    list_display = ["name", "cluster", "gpu_type", "gpu_count", "schedulable", "healthy",
                    "workers", "quarantined", "cordoned"]  # fmt: skip
    list_filter = ["cluster", "gpu_type", "schedulable", "healthy", Quarantined]
    readonly_fields = ["quarantined_at", "quarantine_reason", "cordon_reason", "cordoned_by",
                       "cordoned_at"]  # fmt: skip
    action_form = NodeActionForm
    search_fields = ["name"]
    list_select_related = ["cluster"]
    form = NodeForm
    actions = ["cordon", "drain", "uncordon"]

    def get_queryset(self, request):
        # A worker's first row, counted through the index of live rows: one lookup per node.
        live = Allocation.objects.active().filter(node=OuterRef("pk"), slot=0)
        workers = live.values("node").annotate(n=Count("pk")).values("n")
        return super().get_queryset(request).annotate(workers=Coalesce(Subquery(workers), 0))

    @admin.display(description="workers running", ordering="workers")
    def workers(self, node) -> int:
        """A drained node is empty once this is 0: then it can be serviced or deleted."""
        return node.workers

    @admin.display(description="quarantined", ordering="quarantined_at")
    def quarantined(self, node) -> str:
        if node.quarantined_at is None:
            return ""
        return f"{node.quarantined_at:%Y-%m-%d %H:%M} UTC: {node.quarantine_reason}"

    @admin.display(description="cordoned", ordering="cordoned_at")
    def cordoned(self, node) -> str:
        if node.cordoned_at is None or node.schedulable:
            return ""
        return f"{node.cordoned_at:%Y-%m-%d %H:%M} UTC by {node.cordoned_by}: {node.cordon_reason}"

    @admin.action(
        description="Cordon: place nothing new on them (running work goes on)",
        permissions=["change"],
    )
    def cordon(self, request, queryset):
        self._set_schedulable(request, queryset, False)

    @admin.action(
        description="Drain: cordon them and stop their work (with its grace period to "
        "checkpoint), which is requeued without using a retry",
        permissions=["change"],
    )
    def drain(self, request, queryset):
        nodes = list(queryset.select_related("cluster"))
        stopped = actions.drain([node.pk for node in nodes], request.user.username,
                                reason=asked_reason(request))  # fmt: skip
        noted(request, nodes, "Drained: cordoned, the work on it asked to stop")
        drained = counted(len(nodes), "node")
        self.message_user(
            request, f"Drained {drained}: {counted(stopped, 'attempt')} asked to stop."
        )

    @admin.action(description="Uncordon: place work on them again", permissions=["change"])
    def uncordon(self, request, queryset):
        self._set_schedulable(request, queryset, True)

    def _set_schedulable(self, request, queryset, schedulable: bool) -> None:
        ids = actions.set_schedulable(list(queryset.values_list("pk", flat=True)), schedulable,
                                      request.user.username, asked_reason(request))  # fmt: skip
        changed = list(Node.objects.filter(pk__in=ids).select_related("cluster"))
        verb = "Uncordoned" if schedulable else "Cordoned"
        noted(request, changed, verb)
        self.message_user(request, f"{verb} {counted(len(changed), 'node')}.")

    def get_deleted_objects(self, objs, request):
        # A deleted node takes its released allocations (history only; a live one protects
        # it). Allocations cannot be deleted on their own here, which would otherwise refuse
        # the whole deletion for want of that permission.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed.discard(Allocation._meta.verbose_name)
        return deleted, counts, perms_needed, protected


def asked_reason(request) -> str:
    """The reason typed beside the node list's actions (NodeActionForm), trimmed."""
    return request.POST.get("reason", "").strip()[:200]


class NodeWindowAdmin(PlatformOnly, BulkActions, LookupsChecked, InitialChecked, admin.ModelAdmin):
    """A cluster's nodes set apart from a start to an end: planned by platform admins only
    (it stops tenants' work there); a tenant admin may look."""

    list_display = ["cluster", "nodes_listed", "starts_at", "ends_at", "status", "reason"]
    list_filter = ["cluster"]
    ordering = ["starts_at", "id"]
    filter_horizontal = ["nodes"]

    def get_queryset(self, request):
        return with_status(super().get_queryset(request))

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        # Each choice is written "cluster/name": read with its cluster, not a query per node.
        kwargs["queryset"] = Node.objects.select_related("cluster")
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    @admin.display(description="nodes")
    def nodes_listed(self, window) -> str:
        return nodes_named(window)

    @admin.display(description="status", ordering="status")
    def status(self, window) -> str:
        """Upcoming, in progress or ended, by the database's clock (the scheduler's)."""
        return window.status

    def delete_model(self, request, obj):
        """A window taken back: its nodes take work again, at the next cycle, woken now."""
        super().delete_model(request, obj)
        transaction.on_commit(actions.kick)

    def delete_queryset(self, request, queryset):
        super().delete_queryset(request, queryset)
        transaction.on_commit(actions.kick)

    def save_related(self, request, form, formsets, change):
        """Once its nodes are saved, say how many running jobs it will stop at its start, and
        wake the scheduler (it keeps work off the nodes at once, or gives them back)."""
        super().save_related(request, form, formsets, change)
        transaction.on_commit(actions.kick)
        window = form.instance
        if window.ends_at > timezone.now() and (count := janitor.running_into(window)):
            start = f"{window.starts_at:%Y-%m-%d %H:%M} UTC"
            self.message_user(
                request,
                f"{counted(count, 'running job')} on these nodes may run past {start} by their "
                "runtime limit: they will be stopped then, with their grace period to "
                "checkpoint, and requeued without using a retry.",
                messages.WARNING,
            )


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(NodeWindowAdmin):
    """Planned maintenance of a cluster's nodes (it stops every tenant's work there)."""

    form = MaintenanceWindowForm


@admin.register(Booking)
class BookingAdmin(TenantScoped, NodeWindowAdmin):
    """Nodes booked for one tenant (it stops the other tenants' work there). A tenant admin
    sees their own tenants' bookings only, and only those tenants in the filter."""

    form = BookingForm
    list_display = ["tenant", *NodeWindowAdmin.list_display]
    list_filter = [("tenant", AdministeredTenantFilter), "cluster"]
    tenant_path = "tenant"

    def get_queryset(self, request):
        # Django's list_select_related gives way to the cluster with_status reads already.
        return super().get_queryset(request).select_related("tenant")

    def save_related(self, request, form, formsets, change):
        """Once its nodes are saved, say which of its GPUs the tenant's quota will not let its
        jobs hold: a booking sets nodes apart, not quota (those GPUs would stay idle)."""
        super().save_related(request, form, formsets, change)
        booking = form.instance
        if booking.ends_at > timezone.now() and (beyond := beyond_quota(booking)):
            self.message_user(request, beyond, messages.WARNING)


def beyond_quota(booking: Booking) -> str:
    """What of the booking's GPUs its tenant's quota keeps its jobs from holding at once
    (past its guarantee and borrow limit, per GPU type), "" if none: three queries."""
    nodes = booking.nodes.all() if booking.nodes.exists() else booking.cluster.nodes.all()
    booked = {
        row["gpu_type"]: row["gpus"]
        for row in nodes.exclude(gpu_count=0).values("gpu_type").annotate(gpus=Sum("gpu_count"))
    }
    quotas = Quota.objects.filter(
        tenant=booking.tenant, flavor__in=[gpu_flavor(kind) for kind in booked]
    )
    said = []
    for quota in quotas.order_by("flavor"):
        kind = quota.flavor.removeprefix("gpu:")
        most = quota.guaranteed + quota.borrow_limit
        if booked[kind] > most:
            said.append(
                f"{booked[kind]} {kind} GPUs booked, of which its quota lets its jobs hold "
                f"{most} at once (guaranteed {quota.guaranteed}, borrow limit "
                f"{quota.borrow_limit})"
            )
    if not said:
        return ""
    return (
        f"{booking.tenant.name} ({booking.tenant.slug}): {'; '.join(said)}. A booking sets "
        "nodes apart, not quota: the rest stays idle unless its quota is raised for the "
        "booking's time."
    )


@admin.register(Allocation)
class AllocationAdmin(TenantScoped, BigTable, ReadOnlyAdmin):
    """Allocations are written by the scheduler only: a deleted live one would leave its GPUs
    in use by a worker and free to the scheduler."""

    list_display = ["attempt", "worker", "node", "gpu_index", "gpu_milli", "active", "borrowed"]
    list_filter = ["active", "borrowed"]
    list_select_related = ["attempt__job", "node__cluster"]
    tenant_path = "attempt__job__tenant"
