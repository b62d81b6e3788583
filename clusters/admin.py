import json

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.forms.fields import InvalidJSONInput
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html, format_html_join

from clusters.models import Allocation, Cluster, MaintenanceWindow, Node
from jobs import actions
from jobs.admin import BigTable, ReadOnlyAdmin, noted
from jobs.maintenance_api import nodes_named, with_status
from quotas.admin import LookupsChecked, PlatformOnly, SelectionChecked, TenantScoped


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
    """Django's JSON form field (cluster labels, node topology), where JSON that Python or the
    database cannot take is a form error, shown back as typed, not a 500: Django catches only
    a syntax error, not JSON nested past the parser's depth or a lone surrogate."""

    def to_python(self, value):
        try:
            parsed = super().to_python(value)
        except RecursionError:
            raise ValidationError("Nested too deep.", code="invalid") from None
        if problem := unstorable(parsed):
            raise ValidationError(problem, code="invalid")
        return parsed

    def bound_data(self, data, initial):
        try:
            parsed = super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)
        return InvalidJSONInput(data) if unstorable(parsed) else parsed


@admin.register(Cluster)
class ClusterAdmin(PlatformOnly, SelectionChecked, LookupsChecked, admin.ModelAdmin):
    """The platform's clusters: a tenant admin may look, and issues no agent token (one acts as
    the cluster's agent, which reads every tenant's work placed there)."""

    list_display = ["name", "backend", "region", "health", "last_heartbeat"]
    list_filter = ["backend", "health"]
    readonly_fields = ["health", "last_heartbeat", "node_table"]
    formfield_overrides = {models.JSONField: {"form_class": JsonText}}
    actions = ["rotate_agent_token"]
    NODES_SHOWN = 200

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


@admin.register(Node)
class NodeAdmin(PlatformOnly, SelectionChecked, LookupsChecked, admin.ModelAdmin):
    """The platform's nodes: cordoned, drained and uncordoned by platform admins only (a drain
    stops every tenant's work there); a tenant admin may look. A node the control plane
    quarantined (jobs.quarantine) says why; uncordoning it ends the quarantine."""

    list_display = ["name", "cluster", "gpu_type", "gpu_count", "schedulable", "healthy",
                    "workers", "quarantined"]  # fmt: skip
    list_filter = ["cluster", "gpu_type", "schedulable", "healthy", Quarantined]
    readonly_fields = ["quarantined_at", "quarantine_reason"]
    search_fields = ["name"]
    list_select_related = ["cluster"]
    formfield_overrides = {models.JSONField: {"form_class": JsonText}}
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
        stopped = actions.drain([node.pk for node in nodes], request.user.username)
        noted(request, nodes, "Drained: cordoned, the work on it asked to stop")
        self.message_user(request, f"Node(s) drained: {stopped} attempt(s) asked to stop.")

    @admin.action(description="Uncordon: place work on them again", permissions=["change"])
    def uncordon(self, request, queryset):
        self._set_schedulable(request, queryset, True)

    def _set_schedulable(self, request, queryset, schedulable: bool) -> None:
        ids = actions.set_schedulable(list(queryset.values_list("pk", flat=True)), schedulable)
        changed = list(Node.objects.filter(pk__in=ids).select_related("cluster"))
        verb = "Uncordoned" if schedulable else "Cordoned"
        noted(request, changed, verb)
        self.message_user(request, f"{verb} {len(changed)} node(s).")

    def get_deleted_objects(self, objs, request):
        # A deleted node takes its released allocations (history only; a live one protects
        # it). Allocations cannot be deleted on their own here, which would otherwise refuse
        # the whole deletion for want of that permission.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed.discard(Allocation._meta.verbose_name)
        return deleted, counts, perms_needed, protected


class MaintenanceWindowForm(forms.ModelForm):
    """A window's end after its start, and its nodes of its cluster: each refused on its field,
    the nodes by name, rather than by the database's check or not at all."""

    class Meta:
        model = MaintenanceWindow
        fields = ["cluster", "nodes", "starts_at", "ends_at", "reason"]
        help_texts = {
            "starts_at": "UTC. Until then only work sure to end by then (by its runtime limit) "
            "is placed on these nodes; from then nothing is, and work still there is stopped, "
            "with its grace period to checkpoint, and requeued without using a retry.",
            "ends_at": "UTC. The nodes take work again by themselves from then. Deleting the "
            "window ends it at once.",
        }

    def clean(self):
        data = super().clean()
        starts, ends = data.get("starts_at"), data.get("ends_at")
        if starts and ends and ends <= starts:
            self.add_error("ends_at", "The end must come after the start.")
        elif ends and self.instance.pk is None and ends <= timezone.now():
            self.add_error("ends_at", "The end has passed: the window would change nothing.")
        cluster = data.get("cluster")
        if cluster is None:  # no cluster chosen: that field says so
            return data
        strangers = [str(node) for node in data.get("nodes", []) if node.cluster_id != cluster.pk]
        if strangers:
            self.add_error("nodes", f"Not nodes of {cluster.name}: {', '.join(strangers)}.")
        return data


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(PlatformOnly, SelectionChecked, LookupsChecked, admin.ModelAdmin):
    """Planned maintenance of a cluster's nodes: planned by platform admins only (it stops every
    tenant's work there); a tenant admin may look."""

    form = MaintenanceWindowForm
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


@admin.register(Allocation)
class AllocationAdmin(TenantScoped, BigTable, ReadOnlyAdmin):
    """Allocations are written by the scheduler only: a deleted live one would leave its GPUs
    in use by a worker and free to the scheduler."""

    list_display = ["attempt", "worker", "node", "gpu_index", "gpu_milli", "active", "borrowed"]
    list_filter = ["active", "borrowed"]
    list_select_related = ["attempt__job", "node__cluster"]
    tenant_path = "attempt__job__tenant"
