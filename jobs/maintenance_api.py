"""GET /api/v1/maintenance/ and GET /api/v1/bookings/: the node windows not yet ended, and the
reading of them the portal's overview and the admin share.

Maintenance windows go to every authenticated user (clusters are shared infrastructure).
Bookings are a tenant's: each caller gets those of their own tenants (every tenant's for a
platform admin), and another tenant's booking is never listed.

Whether a window has begun or ended is judged by the database's clock, the scheduler's, within
the query itself: the windows and their status come from one statement, their nodes from one
more. Rate limited as every user endpoint (the default throttles).
"""

from django.db.models import Case, Prefetch, Value, When
from django.db.models.functions import Now
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import maintenance
from clusters.models import Booking, MaintenanceWindow, Node
from jobs import access, reports

UPCOMING, IN_PROGRESS, ENDED = "upcoming", "in progress", "ended"
NODES_NAMED = 10  # node names a window's line gives before "and N more"


def with_status(windows):
    """Windows (maintenance windows or bookings) with their cluster, their nodes by name, and
    `status` (UPCOMING, IN_PROGRESS or ENDED) as the database's clock has it now."""
    status = Case(
        When(starts_at__gt=Now(), then=Value(UPCOMING)),
        When(ends_at__gt=Now(), then=Value(IN_PROGRESS)),
        default=Value(ENDED),
    )
    # With their cluster: a node is written "cluster/name" where the admin shows it.
    nodes = Prefetch("nodes", queryset=Node.objects.select_related("cluster").order_by("name"))
    return windows.select_related("cluster").prefetch_related(nodes).annotate(status=status)


def planned(windows):
    """Of `windows` (a manager or queryset of maintenance windows or bookings), those not yet
    ended (under way or to come), the first to start first."""
    return with_status(windows.not_ended(Now())).order_by("starts_at", "id")


def bookings_of(tenants):
    """The bookings not yet ended of `tenants` (a queryset or list of them), with their tenant,
    the first to start first."""
    return planned(Booking.objects.filter(tenant__in=tenants).select_related("tenant"))


def nodes_named(window) -> str:
    """A window's nodes for a line of text: "all nodes" for none named, else their names, as
    names_listed gives them."""
    return names_listed([node.name for node in window.nodes.all()]) or "all nodes"


def names_listed(names: list[str]) -> str:
    """Node names for a line of text: the first NODES_NAMED of them and how many more."""
    more = len(names) - NODES_NAMED
    shown = ", ".join(names[:NODES_NAMED])
    return f"{shown} and {more} more" if more > 0 else shown


class WindowSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name")
    nodes = serializers.SerializerMethodField()
    in_progress = serializers.SerializerMethodField()

    class Meta:
        model = MaintenanceWindow
        fields = ["id", "cluster", "nodes", "starts_at", "ends_at", "reason", "in_progress"]

    def get_nodes(self, window) -> list[str]:
        """The names of its nodes; [] for every node of the cluster."""
        return [node.name for node in window.nodes.all()]

    def get_in_progress(self, window) -> bool:
        return window.status == IN_PROGRESS


class BookingSerializer(WindowSerializer):
    tenant = serializers.CharField(source="tenant.slug")

    class Meta(WindowSerializer.Meta):
        model = Booking
        fields = ["id", "tenant", *WindowSerializer.Meta.fields[1:]]


class MaintenanceView(APIView):
    def get(self, request):
        windows = planned(MaintenanceWindow.objects)
        return Response({"windows": WindowSerializer(windows, many=True).data})


class BookingsView(APIView):
    """The caller's tenants' bookings not yet ended; ``?tenant=<slug>`` for one of them (another
    tenant's slug is refused as an unknown one is, so the answer never confirms it exists)."""

    def get(self, request):
        tenants = access.report_tenants(request.user)
        if slug := request.query_params.get("tenant"):
            try:
                tenants = reports.pick_tenants(tenants, slug)
            except reports.BadParameter as bad:
                raise ValidationError({bad.field: bad.message}) from None
        bookings = bookings_of(tenants)
        return Response({"bookings": BookingSerializer(bookings, many=True).data})


def window_ahead(job) -> dict | None:
    """The job document's ``window_ahead``: the maintenance window, or another tenant's
    booking, that will stop its live attempt before its runtime limit would end it (null: none
    will). A booking's tenant and reason are the other tenant's affair: not given."""
    ahead = maintenance.ahead_of_job(job)
    if ahead is None:
        return None
    time = serializers.DateTimeField()
    return {
        "kind": ahead.kind,
        "cluster": ahead.cluster,
        "starts_at": time.to_representation(ahead.starts_at),
        "ends_at": time.to_representation(ahead.ends_at),
        "reason": ahead.reason,
        "sentence": ahead.sentence,
    }
