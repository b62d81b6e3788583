"""GET /api/v1/maintenance/: the clusters' maintenance windows not yet ended, to every
authenticated user (clusters are shared infrastructure), and the reading of them the portal's
overview and the admin share.

Whether a window has begun or ended is judged by the database's clock, the scheduler's, within
the query itself: the windows and their status come from one statement, their nodes from one
more. Rate limited as every user endpoint (the default throttles).
"""

from django.db.models import Case, Prefetch, Value, When
from django.db.models.functions import Now
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.models import MaintenanceWindow, Node

UPCOMING, IN_PROGRESS, ENDED = "upcoming", "in progress", "ended"
NODES_NAMED = 10  # node names a window's line gives before "and N more"


def with_status(windows):
    """Windows with their cluster, their nodes by name, and `status` (UPCOMING, IN_PROGRESS or
    ENDED) as the database's clock has it now."""
    status = Case(
        When(starts_at__gt=Now(), then=Value(UPCOMING)),
        When(ends_at__gt=Now(), then=Value(IN_PROGRESS)),
        default=Value(ENDED),
    )
    # With their cluster: a node is written "cluster/name" where the admin shows it.
    nodes = Prefetch("nodes", queryset=Node.objects.select_related("cluster").order_by("name"))
    return windows.select_related("cluster").prefetch_related(nodes).annotate(status=status)


def planned():
    """The windows not yet ended (under way or to come), the first to start first."""
    return with_status(MaintenanceWindow.objects.not_ended(Now())).order_by("starts_at", "id")


def nodes_named(window) -> str:
    """A window's nodes for a line of text: "all nodes" for none named, else their names, the
    first NODES_NAMED of them and how many more."""
    names = [node.name for node in window.nodes.all()]
    if not names:
        return "all nodes"
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


class MaintenanceView(APIView):
    def get(self, request):
        return Response({"windows": WindowSerializer(planned(), many=True).data})
