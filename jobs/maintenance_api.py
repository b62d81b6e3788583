"""GET /api/v1/maintenance/ and GET /api/v1/bookings/: the node windows not yet ended, and the
reading of them the portal's overview and the admin share.

Maintenance windows go to every authenticated user (clusters are shared infrastructure).
Bookings are a tenant's: each caller gets those of their own tenants (every tenant's for a
platform admin), and another tenant's booking is never listed.

Whether a window has begun or ended is judged by the database's clock, the scheduler's, within
the query itself: the windows and their status come from one statement, their nodes from one
more. Rate limited as every user endpoint (the default throttles).
"""

from django.db import transaction
from django.db.models import Case, Prefetch, Value, When
from django.db.models.functions import Now
from django.shortcuts import get_object_or_404
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import maintenance
from clusters.models import Booking, Cluster, MaintenanceWindow, Node
from clusters.window_forms import BookingForm, MaintenanceWindowForm, names_listed
from jobs import access, actions, janitor, reports
from jobs.fields import Moment
from quotas import history
from quotas.models import Tenant

UPCOMING, IN_PROGRESS, ENDED = "upcoming", "in progress", "ended"


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


class WindowAsked(serializers.Serializer):
    """A maintenance window a platform admin plans through the API, its nodes by name ([]:
    every node of the cluster), checked then as the admin's form checks it."""

    cluster = serializers.CharField(max_length=200)
    nodes = serializers.ListField(child=serializers.CharField(max_length=253), default=list)
    starts_at = Moment()
    ends_at = Moment()
    reason = serializers.CharField(max_length=200, allow_blank=True, default="")


class MaintenanceView(APIView):
    """The maintenance windows not yet ended, to anyone; a platform admin plans one (POST), as
    the admin's form does (`window_forms.MaintenanceWindowForm`: its end after its start and
    not past, its nodes of its cluster, locked as a commit locks them while it is saved)."""

    def get(self, request):
        windows = planned(MaintenanceWindow.objects)
        return Response({"windows": WindowSerializer(windows, many=True).data})

    def post(self, request):
        return plan(request, WindowAsked, MaintenanceWindowForm, WindowSerializer, "maintenance")


class BookingAsked(WindowAsked):
    tenant = serializers.CharField(max_length=100)  # its slug


def plan(request, asked_as, form_class, serializer_class, what: str) -> Response:
    """A window (maintenance, a booking) a platform admin plans through the API, read by
    `asked_as` (nodes, and a tenant, by name) and checked and saved by the admin's own form, in
    one transaction. 201 with the window as listed, and `stops`: the running jobs on its nodes,
    not let in, that may run past its start by their runtime limits, stopped then."""
    if not request.user.is_superuser:
        raise PermissionDenied(f"Only a platform admin plans {what}.")
    asked = asked_as(data=request.data)
    asked.is_valid(raise_exception=True)
    data = asked.validated_data
    cluster = Cluster.objects.filter(name=data["cluster"]).first()
    if cluster is None:
        raise ValidationError({"cluster": f"No cluster is named {data['cluster'][:80]!r}."})
    named = dict(cluster.nodes.filter(name__in=data["nodes"]).values_list("name", "pk"))
    if missing := [name for name in data["nodes"] if name not in named]:
        raise ValidationError({"nodes": f"{cluster.name} has no node {missing[0][:80]!r}."})
    fields = {**data, "cluster": cluster.pk, "nodes": [named[n] for n in data["nodes"]]}
    if "tenant" in data:
        tenant = Tenant.objects.filter(slug=data["tenant"]).first()
        if tenant is None:
            raise ValidationError({"tenant": f"No tenant is named {data['tenant'][:80]!r}."})
        fields["tenant"] = tenant.pk
    model = form_class._meta.model
    with transaction.atomic():
        form = form_class(data=fields)
        if not form.is_valid():
            raise ValidationError({field: [str(e) for e in errors]
                                   for field, errors in form.errors.items()})  # fmt: skip
        window = form.save()
        history.record(request.user, [window], "Planned through the API", history.ADDITION)
        transaction.on_commit(actions.kick)  # work keeps off its nodes from the next cycle
    shown = serializer_class(with_status(model.objects).get(pk=window.pk)).data
    return Response({**shown, "stops": janitor.running_into(window)}, status=201)


class WindowView(APIView):
    """A platform admin takes a window (`model`: maintenance, a booking) back, its work called
    off: its nodes take work again at once. 204; 403 for anyone else; 404 for no such window."""

    model = MaintenanceWindow

    def delete(self, request, pk):
        if not request.user.is_superuser:
            raise PermissionDenied(
                f"Only a platform admin takes a {self.model._meta.verbose_name} back."
            )
        with transaction.atomic():
            # Locked, so that a second call taking it back at once waits, then finds none.
            window = get_object_or_404(self.model.objects.select_for_update(), pk=pk)
            history.record(request.user, [window], "Taken back through the API", history.DELETION)
            window.delete()
            transaction.on_commit(actions.kick)  # its nodes take work again
        return Response(status=204)


class BookingsView(APIView):
    """The caller's tenants' bookings not yet ended; ``?tenant=<slug>`` for one of them (another
    tenant's slug is refused as an unknown one is, so the answer never confirms it exists)."""

    def post(self, request):
        return plan(request, BookingAsked, BookingForm, BookingSerializer, "bookings")

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
