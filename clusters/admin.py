from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

from clusters.models import Allocation, Cluster, Node
from jobs.admin import ReadOnlyAdmin
from quotas.admin import TenantScoped


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = [
        "name", "gpu_type", "gpu_count", "gpu_shareable", "cpu_milli", "memory_mb",
        "schedulable", "healthy", "last_seen",
    ]  # fmt: skip
    readonly_fields = ["last_seen"]


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "region", "health", "last_heartbeat"]
    list_filter = ["backend", "health"]
    readonly_fields = ["health", "last_heartbeat"]
    inlines = [NodeInline]
    actions = ["rotate_agent_token"]

    @admin.action(description="Issue a new agent token (shown once)")
    def rotate_agent_token(self, request, queryset):
        # The tokens go on this answer alone, never in a message: messages wait for the next
        # page in a cookie that is signed, not encrypted.
        issued = [(cluster, cluster.rotate_token()) for cluster in queryset]
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


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "gpu_type", "gpu_count", "schedulable", "healthy"]
    list_filter = ["cluster", "gpu_type", "schedulable", "healthy"]
    search_fields = ["name"]
    list_select_related = ["cluster"]

    def get_deleted_objects(self, objs, request):
        # A deleted node takes its released allocations (history only; a live one protects
        # it). Allocations cannot be deleted on their own here, which would otherwise refuse
        # the whole deletion for want of that permission.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed.discard(Allocation._meta.verbose_name)
        return deleted, counts, perms_needed, protected


@admin.register(Allocation)
class AllocationAdmin(TenantScoped, ReadOnlyAdmin):
    """Allocations are written by the scheduler only: a deleted live one would leave its GPUs
    in use by a worker and free to the scheduler."""

    list_display = ["attempt", "worker", "node", "gpu_index", "gpu_milli", "active", "borrowed"]
    list_filter = ["active", "borrowed"]
    list_select_related = ["attempt__job", "node__cluster"]
    tenant_path = "attempt__job__tenant"
