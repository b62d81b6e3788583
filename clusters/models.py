"""Clusters, their nodes, and the allocations that reserve node resources for attempts."""

import hashlib
import re
import secrets

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from clusters.backends.base import FEATURE_RULE, NAME, is_name

GPU_MILLI = 1000  # one whole GPU, in milli-GPU


# A label key: printable, no spaces, at most 253 characters. validate_labels checks cluster
# labels, node topology from agents and a job's cluster selector alike.
LABEL_KEY = r"[!-~]{1,253}"


def validate_labels(value) -> None:
    """Labels are a mapping of label keys to strings without NUL (PostgreSQL cannot store it)."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValidationError('Give a mapping of strings to strings, e.g. {"zone": "a"}.')
    bad = [k for k in value if not re.fullmatch(LABEL_KEY, k)]
    if bad:
        raise ValidationError(f"{bad[0][:80]!r} is not a label key (printable, no spaces).")
    if any("\x00" in v for v in value.values()):
        raise ValidationError("Label values may not contain NUL characters.")


# A node topology label's key, a Kubernetes label's name without its prefix: what a training
# gang may ask for (Job.topology) and so what agents may report (Node.topology). One the jobs
# could not name would be a domain none could keep to.
TOPOLOGY_KEY = NAME
TOPOLOGY_KEY_RULE = (
    "lower-case letters, digits, '-', '_' and '.', from and to a letter or digit, at most 63 "
    "(rack, nvlink, zone)"
)


is_topology_key = is_name


def validate_topology(value) -> None:
    """A node's topology labels: labels whose every key a job could ask for."""
    validate_labels(value)
    bad = [key for key in value if not is_topology_key(key)]
    if bad:
        raise ValidationError(
            f"{bad[0][:80]!r} is no key a job could ask for: a topology key is {TOPOLOGY_KEY_RULE}."
        )


# A node feature's name (Slurm's node Features: ib, nvme), what a job may require of its nodes
# (Job.features): written as a topology key is.
MAX_FEATURES = 32  # of a node, and of a job


def validate_features(value) -> None:
    """A list of feature names, each once."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValidationError('Give a list of names, e.g. ["ib", "nvme"].')
    bad = [name for name in value if not is_name(name)]
    if bad:
        raise ValidationError(f"{bad[0][:80]!r} is no feature name: a feature is {FEATURE_RULE}.")
    if len(set(value)) < len(value):
        twice = next(name for name in value if value.count(name) > 1)
        raise ValidationError(f"Feature {twice!r} is named twice.")
    if len(value) > MAX_FEATURES:
        raise ValidationError(f"At most {MAX_FEATURES} features.")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Cluster(models.Model):
    class Backend(models.TextChoices):
        LOCAL = "local"
        KUBERNETES = "kubernetes"

    class Health(models.TextChoices):
        UNKNOWN = "unknown"
        HEALTHY = "healthy"
        UNHEALTHY = "unhealthy"

    name = models.SlugField(max_length=63, unique=True)
    backend = models.CharField(max_length=16, choices=Backend.choices, default=Backend.LOCAL)
    region = models.CharField(max_length=64, blank=True)
    labels = models.JSONField(default=dict, blank=True, validators=[validate_labels])
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.UNKNOWN)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    placement_cost = models.PositiveSmallIntegerField(
        default=0,
        db_default=0,  # a cluster written by code that does not know the column
        help_text="Work starts on the clusters of the lowest cost that can hold it now (Slurm's "
        "node Weight): give a cloud or rented cluster a higher cost than your own to fill "
        "your own first and burst there when it is full. A gang needing fewer nodes elsewhere "
        "still goes there. Equal costs: the best fit decides. It moves no running work.",
    )
    interruptible = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Its nodes may be taken back at any time (a cloud's spot or preemptible "
        "instances): only preemptible jobs are placed on it, and a job whose node is lost "
        "there is queued again without using a retry, as a preemption is. Give it a lower "
        "placement cost to run preemptible work there first.",
    )
    # The fields of the run spec its agent keeps (``base.AttemptSpec``'s, as the agent's
    # release knows them), from its heartbeats; None: it has not said (a release before they
    # did), so none of the newer fields can be relied on: work needing one is placed elsewhere.
    agent_spec_fields = models.JSONField(null=True, blank=True, editable=False)
    # Only the hash is kept: a leaked database does not let anyone act as an agent.
    agent_token_hash = models.CharField(max_length=64, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def rotate_token(self) -> str:
        """Issue a new agent token, store its hash and return the token (shown once)."""
        token = secrets.token_urlsafe(32)
        self.agent_token_hash = hash_token(token)
        self.save(update_fields=["agent_token_hash"])
        return token

    def token_matches(self, token: str) -> bool:
        return bool(self.agent_token_hash) and secrets.compare_digest(
            self.agent_token_hash, hash_token(token)
        )


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    cpu_milli = models.PositiveIntegerField(
        "CPU (millicores)", help_text="Allocatable CPU, in millicores."
    )
    memory_mb = models.PositiveIntegerField("memory (MiB)", help_text="Allocatable memory, in MiB.")
    gpu_type = models.CharField(
        "GPU type", max_length=64, blank=True, help_text="Empty for CPU-only nodes."
    )
    gpu_count = models.PositiveSmallIntegerField("GPUs", default=0)
    gpu_shareable = models.BooleanField(
        "GPUs shareable", default=False, help_text="Small jobs may share one of this node's GPUs."
    )
    topology = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_labels],
        help_text='Topology labels, e.g. {"rack": "r1"}.',
    )
    features = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        blank=True,
        validators=[validate_features],
        help_text="What it offers that a job may require of its nodes (Slurm's node Features: "
        "ib, nvme), as its agent reports them.",
    )
    schedulable = models.BooleanField(default=True)
    healthy = models.BooleanField(default=True)
    # Why its agent does not report it ready, as the agent says it ("": ready, or not said).
    not_ready_reason = models.CharField(max_length=300, blank=True, default="", db_default="")
    last_seen = models.DateTimeField(null=True, blank=True)
    # Cordoned by the control plane for failing several jobs in a short time (jobs.quarantine);
    # cleared when the node is uncordoned.
    quarantined_at = models.DateTimeField(null=True, blank=True, editable=False)
    quarantine_reason = models.CharField(
        max_length=300, blank=True, default="", db_default="", editable=False
    )
    # When an admin last put it back in service (uncordoned it): the faults of attempts that
    # ended here before then are no longer held against it (jobs.quarantine.held_against).
    faults_cleared_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Why a platform admin cordoned or drained it, who and when (Slurm's sinfo -R: REASON,
    # USER, TIMESTAMP); cleared when it is uncordoned.
    cordon_reason = models.CharField(
        max_length=200, blank=True, default="", db_default="", editable=False
    )
    cordoned_by = models.CharField(
        max_length=150, blank=True, default="", db_default="", editable=False
    )
    cordoned_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name"),
            models.CheckConstraint(
                condition=models.Q(gpu_count=0) | ~models.Q(gpu_type=""),
                name="node_gpus_have_type",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    @property
    def available(self) -> bool:
        return self.schedulable and self.healthy


class WindowQuerySet(models.QuerySet):
    def not_ended(self, now):
        return self.filter(ends_at__gt=now)

    def begun(self, now):
        return self.filter(starts_at__lte=now, ends_at__gt=now)


class NodeWindow(models.Model):
    """Some nodes of a cluster (all of them when ``nodes`` is empty) set apart from
    ``starts_at`` to ``ends_at``. Before the start the scheduler places there only work sure to
    end by then (by its runtime limit), unless the window lets it in; work still there at the
    start that the window does not let in is stopped as a drain stops it, to be requeued
    without using a retry. The nodes come back to everyone by themselves at the end; deleting
    a window ends it at once."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="%(class)ss")
    nodes = models.ManyToManyField(
        Node,
        blank=True,
        related_name="%(class)ss",
        help_text="Leave empty for every node of the cluster.",
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.CharField(max_length=200, blank=True, db_default="", default="")

    objects = WindowQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ["starts_at", "id"]
        indexes = [models.Index(fields=["ends_at"], name="%(class)s_ends")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")),
                name="%(class)s_ends_after_start",
            )
        ]

    def node_ids(self) -> list[int]:
        """The ids of the nodes it sets apart: those chosen, or every node of the cluster."""
        chosen = list(self.nodes.values_list("id", flat=True))
        return chosen or list(self.cluster.nodes.values_list("id", flat=True))


class MaintenanceWindow(NodeWindow):
    """Planned maintenance, as Slurm's maintenance reservation: from its start to its end the
    nodes take no work at all."""

    class Meta(NodeWindow.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.cluster.name} maintenance from {self.starts_at:%Y-%m-%d %H:%M}"


class Booking(NodeWindow):
    """Nodes booked for one tenant (Slurm's reservation for an account; a calendar booking of
    GPUs for a large run or a deadline): from its start to its end only the tenant's work
    starts there, and before the start only the tenant's work and work sure to end by then.
    The tenant's work may run on past the end. Its quota and fair share count as anywhere."""

    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="bookings")

    class Meta(NodeWindow.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.cluster.name} booked for {self.tenant} from {self.starts_at:%Y-%m-%d %H:%M}"


def protect_live(collector, field, sub_objs, using):
    """on_delete of Allocation.node: a node holding a live allocation cannot be deleted (as
    PROTECT: its GPUs are in use); its released allocations, which are only history, go with it
    (as CASCADE). So a drained node can be deleted at once, and jobs.retention removes released
    rows of nodes that stay."""
    live = sub_objs.filter(active=True)
    if live.exists():
        models.PROTECT(collector, field, live, using)
    models.CASCADE(collector, field, sub_objs, using)


class AllocationQuerySet(models.QuerySet):
    def active(self):
        return self.filter(active=True)


class Allocation(models.Model):
    """One reservation of node resources for one worker of an attempt.

    A worker holds one row per GPU (or GPU share) it uses; a CPU-only worker holds one row with
    no GPU. The worker's CPU and memory are carried by its row with `slot` 0 and are zero on the
    others, so sums over rows give the node's usage.

    A GPU share is the milli range [gpu_milli_start, gpu_milli_start + gpu_milli) of that GPU.
    The database refuses two active rows whose ranges overlap on the same GPU (an exclusion
    constraint on PostgreSQL, a trigger on SQLite; see migration 0002), so no code path can
    hand out the same GPU twice, whatever the scheduler believes.
    """

    attempt = models.ForeignKey(
        "jobs.Attempt", on_delete=models.CASCADE, related_name="allocations"
    )
    worker = models.PositiveIntegerField(default=0)
    slot = models.PositiveSmallIntegerField(default=0)
    node = models.ForeignKey(Node, on_delete=protect_live, related_name="allocations")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    gpu_milli_start = models.PositiveSmallIntegerField(default=0)
    gpu_milli = models.PositiveSmallIntegerField(default=0)
    cpu_milli = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveIntegerField(default=0)
    borrowed = models.BooleanField(default=False)
    active = models.BooleanField(default=True)
    created = models.DateTimeField(default=timezone.now)
    released = models.DateTimeField(null=True, blank=True)

    objects = AllocationQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["attempt", "worker", "slot"], name="allocation_unique_slot"
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(gpu_index__isnull=True, gpu_milli=0)
                    | models.Q(
                        gpu_index__isnull=False,
                        gpu_milli__gt=0,
                        gpu_milli__lte=GPU_MILLI - models.F("gpu_milli_start"),
                    )
                ),
                name="allocation_gpu_share_within_gpu",
            ),
            models.CheckConstraint(
                condition=models.Q(active=True, released__isnull=True)
                | models.Q(active=False, released__isnull=False),
                name="allocation_released_iff_inactive",
            ),
        ]
        indexes = [
            models.Index(fields=["node"], condition=models.Q(active=True), name="alloc_live_node"),
        ]

    def __str__(self) -> str:
        gpu = "" if self.gpu_index is None else f" gpu{self.gpu_index}"
        return f"attempt {self.attempt_id} worker {self.worker} on {self.node_id}{gpu}"
