from django.contrib import admin

from clusters.models import Node
from quotas.models import Membership, PriorityClass, Quota, Tenant
from quotas.usage import usage_by_tenant


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 1
    fields = ["flavor", "guaranteed", "borrow_limit", "in_use"]
    readonly_fields = ["in_use"]

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


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]

    def get_queryset(self, request):
        # Each row's label names its user and tenant: one query for all, not two per row.
        return super().get_queryset(request).select_related("user", "tenant")


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "fair_share_weight", "created"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [QuotaInline, MembershipInline]


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    list_display = ["name", "value", "may_preempt", "description"]
    filter_horizontal = ["tenants"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["tenant", "flavor", "guaranteed", "borrow_limit"]
    list_filter = ["flavor"]
    list_select_related = ["tenant"]
