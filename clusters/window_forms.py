"""The forms a platform admin plans a window of nodes with, a maintenance window or a tenant's
booking: the admin's pages and the maintenance API check them alike."""

from django import forms
from django.utils import timezone

from clusters.models import Booking, MaintenanceWindow, Node
from mlsched_site import turns

NODES_NAMED = 10  # node names a window's line gives before "and N more"
BOOKING_LOCK = 0x6D6C_6262  # advisory lock space: one key per cluster, while a booking is saved


def names_listed(names: list[str]) -> str:
    """Node names for a line of text: the first NODES_NAMED of them and how many more."""
    more = len(names) - NODES_NAMED
    shown = ", ".join(names[:NODES_NAMED])
    return f"{shown} and {more} more" if more > 0 else shown


def lock_covered(cluster, nodes) -> None:
    """Lock the nodes a window covers (its chosen ones, or every node of its cluster) in id
    order, as a scheduler's commit does (``jobs.commit.lock_nodes``), until the admin's
    transaction ends: a commit in flight on them ends first (and the window counts the work it
    placed), and a commit after it reads the window. Otherwise a cycle that decided before the
    window was saved could place work into it."""
    covered = Node.objects.filter(pk__in=[n.pk for n in nodes]) if nodes else cluster.nodes
    list(covered.select_for_update().order_by("id").values_list("id", flat=True))


class NodeWindowForm(forms.ModelForm):
    """A window's (maintenance, booking) end after its start, and its nodes of its cluster: each
    refused on its field, the nodes by name, rather than by the database's check or not at
    all."""

    what = "window"  # how the end's error names it

    def clean(self):
        data = super().clean()
        starts, ends = data.get("starts_at"), data.get("ends_at")
        if starts and ends and ends <= starts:
            self.add_error("ends_at", "The end must come after the start.")
        elif ends and self.instance.pk is None and ends <= timezone.now():
            self.add_error("ends_at", f"The end has passed: the {self.what} would change nothing.")
        cluster = data.get("cluster")
        if cluster is None:  # no cluster chosen: that field says so
            return data
        strangers = [str(node) for node in data.get("nodes", []) if node.cluster_id != cluster.pk]
        if strangers:
            self.add_error("nodes", f"Not nodes of {cluster.name}: {', '.join(strangers)}.")
        elif not self.errors:
            lock_covered(cluster, data.get("nodes", []))
        return data


class MaintenanceWindowForm(NodeWindowForm):
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


class BookingForm(NodeWindowForm):
    """A booking, and no node booked for two tenants at once: one overlapping another tenant's
    booking on a node they share is refused, naming it. A maintenance window over them is no
    reason to refuse: a booking does not keep the platform from servicing its nodes."""

    what = "booking"

    class Meta:
        model = Booking
        fields = ["tenant", "cluster", "nodes", "starts_at", "ends_at", "reason"]
        help_texts = {
            "starts_at": "UTC. Until then only the tenant's work and work sure to end by then "
            "(by its runtime limit) is placed on these nodes; from then only the tenant's is, "
            "and other tenants' work still there is stopped, with its grace period to "
            "checkpoint, and requeued without using a retry.",
            "ends_at": "UTC. The nodes take every tenant's work again from then; the tenant's "
            "work there runs on. Deleting the booking ends it at once.",
        }

    def clean(self):
        data = super().clean()
        if self.errors:  # times, cluster or nodes refused already: nothing sure to compare
            return data
        cluster, nodes = data["cluster"], list(data.get("nodes", []))
        # Bookings of one cluster are checked and saved in turn (the admin saves in one
        # transaction): two overlapping ones saved at once cannot both pass.
        turns.take_turn(BOOKING_LOCK, cluster.pk)
        if clash := self.clash(cluster, nodes, data["starts_at"], data["ends_at"]):
            self.add_error("nodes" if nodes else "starts_at", clash)
        return data

    def clash(self, cluster, nodes, starts, ends) -> str:
        """Why another tenant's booking overlapping this one on a node they share stands in
        its way, "" if none does. A booking of no nodes named has every node of the cluster,
        those to come included."""
        others = (
            Booking.objects.filter(cluster=cluster, starts_at__lt=ends, ends_at__gt=starts)
            .exclude(tenant=self.cleaned_data["tenant"])
            .exclude(pk=self.instance.pk)
            .select_related("tenant")
            .prefetch_related("nodes")
            .order_by("starts_at", "id")
        )
        mine = {node.pk: node.name for node in nodes}
        for other in others:
            theirs = {node.pk: node.name for node in other.nodes.all()}
            if mine and theirs:
                shared = [mine[pk] for pk in mine.keys() & theirs.keys()]
                if not shared:
                    continue
            else:  # one of them has every node: the other's are shared
                shared = list((mine or theirs).values())
            on = names_listed(sorted(shared)) or f"every node of {cluster.name}"
            return (
                f"Overlaps booking #{other.pk} of {other.tenant.name} ({other.tenant.slug}), "
                f"{other.starts_at:%Y-%m-%d %H:%M} to {other.ends_at:%Y-%m-%d %H:%M} UTC, on "
                f"{on}: a node is booked for one tenant at a time."
            )
        return ""
