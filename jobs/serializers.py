"""The REST API's shapes: what a submission may say, what a job looks like, and how a job
list's query parameters are read. What is asked of a job that exists (a change, a requeue, a
cancel, a resubmission) is jobs/action_serializers.py's."""

import re

from django.conf import settings
from django.db.models import Q, prefetch_related_objects
from django.utils import timezone
from rest_framework import serializers

from clusters.backends.base import FEATURE_RULE, is_name
from clusters.models import (
    LABEL_KEY,
    MAX_FEATURES,
    TOPOLOGY_KEY,
    TOPOLOGY_KEY_RULE,
    Node,
    validate_labels,
)
from jobs import access, efficiency
from jobs.cli.written import EXIT_CODES
from jobs.dependencies import MAX_DEPENDENCIES, Wait
from jobs.fields import (
    MAX_BATCH_SPEC_CHARS,
    MAX_COMMAND_CHARS,
    MAX_ENV_CHARS,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_RUNTIME,
    MAX_SHARDS,
    Begin,
    Choice,
    Deadline,
    DependencyItem,
    StrictFields,
    TextKeys,
    at_most,
    deadline_problem,
    validate_env_names,
    volumes_field,
    within,
)
from jobs.models import Family, Job, JobEvent, LogChunk
from jobs.states import State
from quotas import tenant_secrets, tenant_volumes
from quotas.models import PriorityClass
from quotas.tenant_secrets import MAX_SECRETS_PER_JOB

# Preemptible unless the submission says otherwise: training is not (it may lose hours of work),
# batch inference and evaluation are.
PREEMPTIBLE_BY_DEFAULT = {
    Family.TRAINING: False,
    Family.BATCH_INFERENCE: True,
    Family.EVALUATION: True,
}


def priority_class_named(name: str) -> PriorityClass:
    found = PriorityClass.objects.filter(name=name).first()
    if found is None:
        raise serializers.ValidationError(f"No priority class {name!r}.")
    return found


def default_class(tenant) -> PriorityClass:
    """The class of the tenant's jobs submitted without one: its default (Slurm's DefaultQOS),
    else `normal`; a 400 naming priority_class when there is none of that name."""
    if tenant.default_priority_class is not None:
        return tenant.default_priority_class
    try:
        return priority_class_named("normal")
    except serializers.ValidationError as missing:
        raise serializers.ValidationError({"priority_class": missing.detail}) from None


AT_LEAST_ONE = "At least 1: the fewest workers an elastic gang may start with."
RETRIES_EVERY_CODE = "retry_user_errors retries every exit code already: leave one of them out."


# A worker's request: each number's bounds (a submission's, and a queued job's change's).
REQUEST = {"cpu_milli": (1, 10_000_000), "memory_mb": (1, 100_000_000), "gpus": (0, 64),
           "gpu_milli": (0, 999)}  # fmt: skip
# How many nodes a job may exclude.
MAX_EXCLUDED_NODES = 100


def request_field(name: str, **options) -> serializers.IntegerField:
    low, high = REQUEST[name]
    return serializers.IntegerField(min_value=low, max_value=high, **options)


def request_problem(family: str, request: dict) -> dict[str, str]:
    """What is wrong with a worker's whole request for a job of the family, on the field at
    fault ({} if nothing): whole GPUs and a share of one at once, a share for training."""
    if request["gpus"] and request["gpu_milli"]:
        return {"gpu_milli": "Ask for whole GPUs or for a share of one, not both."}
    if family == Family.TRAINING and request["gpu_milli"]:
        return {"gpu_milli": "Training gets whole, exclusive GPUs: use gpus."}
    return {}


def gpu_types_field(**options) -> serializers.ListField:
    """The GPU types a job takes, most preferred first (empty: any), as a submission and a
    change of a queued job's give them."""
    return serializers.ListField(
        child=serializers.CharField(max_length=64), max_length=16, **options
    )


def cluster_selector_field(**options) -> serializers.Field:
    """The labels a cluster must carry to take a job (empty: any cluster), as a submission
    and a change of a queued job's give them."""
    return TextKeys(child=serializers.CharField(), validators=[validate_labels], **options)


def node_names_field(**options) -> serializers.ListField:
    """Names of nodes, as a submission and a change of a queued job's give those it never runs
    on (`exclude_nodes`, Slurm's --exclude) and those it runs on alone (`only_nodes`): each a
    node's, in any cluster (a name no node has is refused: a typo would exclude nothing, or
    keep the job waiting for ever), each once; empty: none excluded, any node."""
    return serializers.ListField(
        child=serializers.CharField(max_length=253), max_length=MAX_EXCLUDED_NODES,
        validators=[known_nodes], **options,
    )  # fmt: skip


def features_field(**options) -> serializers.ListField:
    """The features every node of a job must offer (Slurm's --constraint=ib&nvme; empty:
    none), as a submission and a change of a queued job's give them: each one some node offers
    (a name none offers is refused: a typo would keep the job waiting), each once."""
    return serializers.ListField(
        child=serializers.CharField(max_length=63), max_length=MAX_FEATURES,
        validators=[offered_features], **options,
    )  # fmt: skip


def offered_features(names: list[str]) -> None:
    """Refuse a feature named twice, a name no feature could have, or one no node offers."""
    each_once("Feature")(names)
    if bad := [name for name in names if not is_name(name)]:
        raise serializers.ValidationError(f"{bad[0]!r} is no feature: a feature is {FEATURE_RULE}.")
    offered = {feature for offers in Node.objects.exclude(features=[]).values_list(
        "features", flat=True) for feature in offers}  # fmt: skip
    if missing := [name for name in names if name not in offered]:
        raise serializers.ValidationError(f"No node offers feature {missing[0]!r}.")


def each_once(what: str):
    """A list field's validator refusing an item given twice, naming it: "Node 'a' is named
    twice."."""

    def validate(items: list) -> None:
        if len(set(items)) < len(items):
            twice = next(item for item in items if items.count(item) > 1)
            raise serializers.ValidationError(f"{what} {twice!r} is named twice.")

    return validate


FIRST_TYPE_WAIT_MAX = 7 * 86400  # the longest a job waits for its first GPU type


MAX_RETRIES = 20  # the most retries a job may ask


def max_retries_field(**options) -> serializers.IntegerField:
    """How many retries a job may use, as a submission and a change of them give it."""
    return serializers.IntegerField(min_value=0, max_value=MAX_RETRIES, **options)


def retry_exit_codes_field(**options) -> serializers.ListField:
    """The exits of a job's own code to retry (Kubernetes' podFailurePolicy onExitCodes), as a
    submission and a change of them give them: each 1 to 255, once."""
    return serializers.ListField(
        child=serializers.IntegerField(min_value=EXIT_CODES.start, max_value=EXIT_CODES[-1]),
        max_length=len(EXIT_CODES), validators=[each_once("Exit code")], **options,
    )  # fmt: skip


def first_type_wait_field(**options) -> serializers.IntegerField:
    """How long a job takes the first of its GPU types alone, from when it may run, as a
    submission and a change of a queued job's give it (null: any type at once)."""
    return serializers.IntegerField(
        min_value=1, max_value=FIRST_TYPE_WAIT_MAX, allow_null=True, **options
    )


def first_type_problem(data: dict) -> str:
    """Why a job may not wait for its first GPU type ("": it may): it lists fewer than two, or
    asks for no GPU."""
    if not (data["gpus"] or data["gpu_milli"]):
        return "A job without GPUs has no GPU type to wait for."
    if len(data["gpu_types"]) < 2:
        return "It waits for the first of its GPU types before the others: list two or more."
    return ""


# A batch of several shards asking for time-limit warnings: each shard would be told.
BATCH_TIME_LIMIT = "A batch's shards would each be told: ask it of a job of one shard."


def mail_problem(user, whose: str = "Your") -> str:
    """Why the user's jobs cannot be emailed of ("": they can); `whose` account it is, said
    to the asker."""
    if not settings.MLSCHED_SMTP_URL:
        return "This platform sends no email: its admins have set no mail server."
    if user is not None and not user.email:
        who = "set it" if whose == "Your" else "they set it"
        return (f"{whose} account has no email address to send to: {who} at /accounts/email/ "
                "(or a platform admin does).")  # fmt: skip
    return ""


def existing_nodes(names: list[str]) -> set[str]:
    """Those of the names that some cluster has a node of."""
    return set(Node.objects.filter(name__in=names).values_list("name", flat=True))


def known_nodes(names: list[str]) -> None:
    """Refuse a list naming a node twice, or a node no cluster has."""
    each_once("Node")(names)
    found = existing_nodes(names)
    if missing := [name for name in names if name not in found]:
        raise serializers.ValidationError(f"No cluster has a node named {missing[0]!r}.")


def max_runtime_field(**options) -> serializers.IntegerField:
    """A runtime limit in seconds, as a submission and a change of a queued job's give it."""
    return serializers.IntegerField(
        min_value=1, max_value=int(MAX_RUNTIME.total_seconds()), **options
    )


def min_workers_field(**options) -> serializers.IntegerField:
    """A training gang's min_workers, as a submission and a change of it take it: a number
    from 1, or null (rigid). Whether it fits the job is min_workers_problem's."""
    return serializers.IntegerField(
        min_value=1,
        max_value=1024,
        allow_null=True,
        error_messages={
            "min_value": AT_LEAST_ONE,
            "max_value": "At most {max_value}, and no more than workers.",
        },
        **options,
    )


class SubmitSerializer(StrictFields, serializers.Serializer):
    tenant = serializers.SlugField()
    name = serializers.CharField(max_length=200)
    family = Choice(choices=Family.choices)
    image = serializers.CharField(max_length=500)
    command = serializers.ListField(
        child=serializers.CharField(max_length=10_000, trim_whitespace=False),
        min_length=1,
        max_length=1000,
        validators=[within(MAX_COMMAND_CHARS, "command")],
    )
    env = TextKeys(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        default=dict,
        validators=[validate_env_names, within(MAX_ENV_CHARS, "environment")],
    )
    # Names of its tenant's secrets (quotas.TenantSecret) its workers get as environment
    # variables; the values stay with the tenant.
    secrets = serializers.ListField(
        child=serializers.CharField(max_length=100), default=list, max_length=MAX_SECRETS_PER_JOB
    )
    # Its tenant's data volumes its workers mount, each with where they see it.
    volumes = volumes_field(default=list)
    cpu_milli = request_field("cpu_milli")
    memory_mb = request_field("memory_mb")
    gpus = request_field("gpus", default=0)
    gpu_milli = request_field("gpu_milli", default=0)
    gpu_types = gpu_types_field(default=list)
    # Takes only the first of its GPU types for this long, from when it may run, then any.
    first_type_wait_s = first_type_wait_field(default=None)
    cluster_selector = cluster_selector_field(default=dict)
    exclude_nodes = node_names_field(default=list)
    # Kubernetes' node affinity on the hostname: the nodes it runs on alone.
    only_nodes = node_names_field(default=list)
    # Slurm's --constraint=ib&nvme: what every node it runs on must offer.
    features = features_field(default=list)
    # Slurm's --exclusive: each worker takes a node of exactly its GPUs to itself.
    exclusive = serializers.BooleanField(default=False)
    labels = TextKeys(
        child=serializers.CharField(max_length=MAX_LABEL_VALUE, allow_blank=True),
        default=dict,
        validators=[validate_labels, at_most(MAX_LABELS, "labels")],
    )
    workers = serializers.IntegerField(min_value=1, max_value=1024, default=1)
    # An elastic training gang (torchrun's --nnodes=MIN:MAX): the fewest workers it may start
    # with when its whole gang does not fit. Null, or left out: rigid, all its workers or none.
    # Equal to workers is rigid too, and stored as null: "elastic" means it may start smaller.
    min_workers = min_workers_field(default=None)
    # A training gang's topology domain: the key of a node topology label all its nodes share
    # one value of (Kueue's required topology, Slurm's --switches). Empty: any nodes.
    topology = serializers.RegexField(
        TOPOLOGY_KEY, max_length=63, default="", allow_blank=True,
        error_messages={"invalid": f"A topology label's key: {TOPOLOGY_KEY_RULE}."},
    )  # fmt: skip
    shards = serializers.IntegerField(min_value=1, max_value=MAX_SHARDS, default=1)
    # Slurm's array throttle (--array=0-999%10): at most this many of the batch's shards run at
    # once; null, no limit.
    max_running_shards = serializers.IntegerField(
        min_value=1, max_value=MAX_SHARDS, default=None, allow_null=True
    )
    # Left out: its tenant's default class, else normal (default_class).
    priority_class = serializers.SlugField(required=False)
    priority = serializers.IntegerField(default=0, min_value=-1000, max_value=1000)
    preemptible = serializers.BooleanField(required=False)
    # Left out: its class's default (PriorityClass.default_runtime_s), if it has one.
    max_runtime_s = max_runtime_field(required=False)
    max_retries = max_retries_field(default=3)
    retry_user_errors = serializers.BooleanField(default=False)
    # The exits of its own code to retry (Kubernetes' podFailurePolicy onExitCodes).
    retry_exit_codes = retry_exit_codes_field(default=list)
    notify_start = serializers.BooleanField(default=False)
    notify_requeue = serializers.BooleanField(default=False)
    # Slurm's --mail-type=TIME_LIMIT_90: told when a run has used 90 % of its runtime limit.
    notify_time_limit = serializers.BooleanField(default=False)
    # Slurm's --mail-user: what its team's webhook is told of it, emailed to its submitter too.
    notify_email = serializers.BooleanField(default=False)
    idempotency_key = serializers.CharField(max_length=128, required=False)
    depends_on = serializers.ListField(
        child=DependencyItem(),
        default=list,
        max_length=MAX_DEPENDENCIES,
    )
    # Slurm's --dependency=singleton: after every earlier job of the same tenant, submitter and
    # name (a batch waits, and is waited for, as one job).
    singleton = serializers.BooleanField(default=False)
    # Slurm's --begin: queued, but not placed before this time.
    begin = Begin(default=None, allow_null=True)
    # Slurm's --deadline: canceled while queued once it could no longer end by this time.
    deadline = Deadline(default=None, allow_null=True)

    def __init__(self, *args, tenants=None, jobs=None, user=None, **kwargs):
        """`tenants`: those the caller may submit to; `jobs`: those the caller can see (only
        those may be named in depends_on); `user`: the caller, its submitter."""
        super().__init__(*args, **kwargs)
        self.tenants, self.jobs, self.user = tenants, jobs, user

    def validate_notify_email(self, asked: bool) -> bool:
        if asked and (problem := mail_problem(self.user)):
            raise serializers.ValidationError(problem)
        return asked

    def validate_tenant(self, slug):
        tenant = self.tenants.filter(slug=slug).first()
        if tenant is None:
            raise serializers.ValidationError(f"No tenant {slug!r} you may submit to.")
        return tenant

    def validate_priority_class(self, name):
        return priority_class_named(name)

    def validate(self, data):
        family = data["family"]
        tenant = data["tenant"]
        data["priority_class"] = data.get("priority_class") or default_class(tenant)
        priority_class = data["priority_class"]
        if not priority_class.open_to(tenant):
            message = f"Tenant {tenant.slug!r} may not submit at {priority_class.name!r}."
            raise serializers.ValidationError({"priority_class": message})
        if "max_runtime_s" not in data:
            if priority_class.default_runtime_s is None:
                raise serializers.ValidationError({"max_runtime_s": (
                    f"This field is required: class {priority_class.name!r} has no default "
                    "runtime limit.")})  # fmt: skip
            data["max_runtime_s"] = priority_class.default_runtime_s
        if too_long := priority_class.runtime_refusal(data["max_runtime_s"]):
            raise serializers.ValidationError({"max_runtime_s": too_long})
        if refused := tenant.image_refusal(data["image"]):
            raise serializers.ValidationError({"image": refused})
        if problem := request_problem(family, data):
            raise serializers.ValidationError(problem)
        if family == Family.EVALUATION and data["workers"] != 1:
            raise serializers.ValidationError({"workers": "An evaluation job has one worker."})
        # An attempt runs on one cluster; the core places a batch job's workers apart, each
        # where it fits, on any cluster. A batch spreads by its shards.
        if family == Family.BATCH_INFERENCE and data["workers"] != 1:
            raise serializers.ValidationError(
                {"workers": "A batch inference shard has one worker: spread a batch by shards."}
            )
        if problem := min_workers_problem(data):
            raise serializers.ValidationError({"min_workers": problem})
        if data["min_workers"] == data["workers"]:  # its whole gang: rigid
            data["min_workers"] = None
        if data["topology"] and family != Family.TRAINING:
            raise serializers.ValidationError(
                {"topology": "Only a training gang keeps its nodes in one topology domain: "
                 "leave topology out."}
            )  # fmt: skip
        if problem := nodes_problem(data["only_nodes"], data["exclude_nodes"]):
            raise serializers.ValidationError({"only_nodes": problem})
        if data["exclusive"] and (problem := tenant.exclusive_refusal() or exclusive_problem(data)):
            raise serializers.ValidationError({"exclusive": problem})
        if data["shards"] > 1 and family != Family.BATCH_INFERENCE:
            raise serializers.ValidationError({"shards": "Only batch inference has shards."})
        if problem := batch_too_large(data):
            raise serializers.ValidationError({"shards": problem})
        if data["notify_time_limit"] and data["shards"] > 1:
            raise serializers.ValidationError({"notify_time_limit": BATCH_TIME_LIMIT})
        if data["first_type_wait_s"] is not None and (problem := first_type_problem(data)):
            raise serializers.ValidationError({"first_type_wait_s": problem})
        if data["max_running_shards"] is not None and data["shards"] == 1:
            raise serializers.ValidationError({"max_running_shards": NOT_A_BATCH})
        data.setdefault("preemptible", PREEMPTIBLE_BY_DEFAULT[family])
        if problem := dependency_problem(data["depends_on"], tenant, self.jobs):
            raise serializers.ValidationError({"depends_on": problem})
        if problem := deadline_problem(data):
            raise serializers.ValidationError({"deadline": problem})
        if data["retry_exit_codes"] and data["retry_user_errors"]:
            raise serializers.ValidationError({"retry_exit_codes": RETRIES_EVERY_CODE})
        data["retry_exit_codes"] = sorted(data["retry_exit_codes"])
        if problem := secrets_problem(data["secrets"], data["env"], tenant):
            raise serializers.ValidationError({"secrets": problem})
        data["volumes"] = [dict(mount) for mount in data["volumes"]]
        if problem := volumes_problem(data["volumes"], tenant):
            raise serializers.ValidationError({"volumes": problem})
        return data


def nodes_problem(only: list[str], excluded: list[str]) -> str:
    """Why a job may not run only on `only` while excluding `excluded`, "" if it may."""
    if both := sorted(set(only) & set(excluded)):
        return f"{both[0]!r} is in exclude_nodes too: a node it runs on is not excluded."
    return ""


def exclusive_problem(request: dict) -> str:
    """Why a worker of this request cannot take a node to itself, "" if it can: it asks a
    share of a GPU, or no node has exactly its GPUs (none, for a CPU-only one)."""
    if request["gpu_milli"]:
        return "An exclusive job takes whole nodes: ask whole GPUs, or none."
    gpus = request["gpus"]
    if Node.objects.filter(gpu_count=gpus).exists():
        return ""
    if not gpus:
        return "No node without GPUs: a CPU-only exclusive job takes a node without GPUs."
    return (
        f"No node has exactly {gpus} GPU{'' if gpus == 1 else 's'}: each worker of an "
        "exclusive job takes every GPU of a node of its own."
    )


def volumes_problem(mounts: list[dict], tenant) -> str:
    """Why a job may not mount these, "" if it may."""
    if not mounts:
        return ""
    return tenant_volumes.mounts_problem(mounts) or tenant_volumes.unusable(tenant, mounts)


def secrets_problem(names: list[str], env: dict, tenant) -> str:
    """Why a job may not name these secrets, "" if it may: each once, none also in its env,
    each a variable its tenant has."""
    if len(set(names)) < len(names):
        return "A secret is named twice."
    if both := sorted(set(names) & set(env)):
        return f"{both[0]!r} is in env too: a variable is set one way."
    return tenant_secrets.unusable(tenant, names)


def min_workers_problem(data: dict) -> str:
    """Why the submission's min_workers (or a change of a queued job's, given its family and
    workers) cannot stand, "" if it can: only a training gang is elastic, and it starts with
    at least 1 and no more workers than it has."""
    least, workers = data["min_workers"], data["workers"]
    if least is None:
        return ""
    if data["family"] != Family.TRAINING:
        return (
            "Only a training job is elastic (starts with fewer workers when all do not fit): "
            "leave min_workers out, or null."
        )
    if least < 1:
        return AT_LEAST_ONE
    if least > workers:
        return (
            f"{least} is more than its {workers} workers: min_workers is the fewest of them "
            "it may start with, at most workers."
        )
    return ""


NOT_A_BATCH = (
    "Only a batch (shards above 1) limits how many of its shards run at once: leave it out, "
    "or give shards."
)


def batch_too_large(data: dict) -> str:
    """Why the batch's shards would store too much, "" if they would not (each shard keeps its
    own command and environment)."""
    env = data["env"]
    each = sum(map(len, data["command"])) + sum(len(k) + len(v) for k, v in env.items())
    if data["shards"] * each <= MAX_BATCH_SPEC_CHARS:
        return ""
    return (
        f"{data['shards']} shards of a {each // 1024} KiB command and environment store over "
        f"{MAX_BATCH_SPEC_CHARS // 2**20} MiB: use fewer shards or a shorter command and "
        "environment (a file the job reads)."
    )


def dependency_problem(waits: list[Wait], tenant, visible) -> str:
    """What is wrong with a submission's depends_on, "" if nothing: each a job the caller can
    see (`visible`), of the submission's tenant, and no shard but a batch's first (which
    stands for the whole batch), named once, whatever the kinds. A job the caller cannot see,
    another tenant's included, is answered as one that does not exist. Whether a dependency
    has already ended the wrong way is asked under lock, at submit (jobs.dependencies.hold)."""
    ids = [wait.on for wait in waits]
    if twice := sorted(pk for pk in set(ids) if ids.count(pk) > 1):
        return f"Job #{twice[0]} is named twice."
    found = {job.pk: job for job in visible.filter(pk__in=ids)} if ids else {}
    for pk in ids:
        job = found.get(pk)
        if job is None:
            return f"No job #{pk} you can see."
        if job.tenant_id != tenant.pk:
            return (
                f"Job #{pk} is not in tenant {tenant.slug!r}: a job waits only for jobs of its "
                "own tenant."
            )
        if job.parent_id is not None:
            return (
                f"Job #{pk} is shard {job.shard_index} of batch #{job.parent_id}: depend on the "
                f"batch, #{job.parent_id}, which waits for every shard."
            )
    return ""


LARGEST_ID = 2**63 - 1  # of a bigint primary key


def whole_number(text: str) -> int | None:
    """A query parameter's whole number (ASCII digits only), at most LARGEST_ID: a larger one
    stands for it, as no id lies between them, and is not converted (Python refuses strings of
    over 4,300 digits, and a database may refuse to compare an id with a larger number: SQLite
    does). None if it is no whole number."""
    if not (text.isascii() and text.isdigit()):
        return None
    return LARGEST_ID if len(text) > len(str(LARGEST_ID)) else min(int(text), LARGEST_ID)


FLAGS = {"1": True, "true": True, "0": False, "false": False}


def flag(raw: str) -> bool:
    """A yes-or-no query parameter: 1 or true, 0 or false, in any case (FLAGS); ValueError,
    saying what it takes, for anything else."""
    value = FLAGS.get(raw.lower())
    if value is None:
        raise ValueError("1 or 0 (or true or false).")
    return value


def held_filter(raw: str) -> Q:
    """The job list's `?held=` (the API's and the portal's) as a filter: 1 or true for the held
    jobs, 0 or false for the others, in any case (FLAGS). ValueError, saying what it takes, for
    anything else."""
    held = flag(raw)
    # Only a queued job is held (one that leaves the queue is released; one requeued held
    # while it runs is held once it is queued again): saying so lets the planner read the
    # queued jobs' indexes instead of walking back through every job.
    queued_held = Q(state=State.QUEUED) & ~Q(held="")
    return queued_held if held else ~queued_held


def labels_asked(written: list[str]) -> list[tuple[str, str | None]]:
    """The job list's `?label=` values (the API's, the portal's and the CLI's), each
    `key=value` (the value is everything after the first '=') or a bare `key` (any value), as
    JobQuerySet.labelled takes them. ValueError, saying what it takes, for an empty key, one
    no label could have, or more of them than a job may carry."""
    if len(written) > MAX_LABELS:
        raise ValueError(f"At most {MAX_LABELS} labels.")
    asked = []
    for text in written:
        key, equals, value = text.partition("=")
        if not re.fullmatch(LABEL_KEY, key):
            raise ValueError(
                f"{text[:80]!r} is no label: key=value, or a key alone (printable, no spaces)."
            )
        asked.append((key, value if equals else None))
    return asked


def submission_of(job: Job) -> dict:
    """What a client would post to submit `job` again: its spec, as SubmitSerializer takes it.

    Read from the serializer's own fields, so a field a submission gains is copied too. The
    idempotency key stays behind: under it, the submission would be answered with `job` itself.
    """
    related = {
        "tenant": lambda: job.tenant.slug,
        "priority_class": lambda: job.priority_class.name,
        "depends_on": lambda: [
            {"id": on, "kind": kind}
            for on, kind in job.dependency_links.order_by("on_id").values_list("on_id", "kind")
        ],
    }
    # In the serializer's order, as a person writes a submission (tenant, name, family, ...).
    return {
        name: related[name]() if name in related else getattr(job, name)
        for name in SubmitSerializer().fields
        if name != "idempotency_key"
    }


def spec_as_read(user, job: Job) -> dict:
    """submission_of(job) as `user` may read it: a batch's shard gives its batch's (whose first
    shard holds the dependencies), and the jobs it waits for that they may not see are left
    out. The API's spec and the portal's copy of a job."""
    source = job if job.parent_id is None else Job.objects.get(pk=job.parent_id)
    spec = submission_of(source)
    hidden = access.hidden_from(user, [source])
    spec["depends_on"] = [item for item in spec["depends_on"] if item["id"] not in hidden]
    return spec


class JobSerializer(serializers.ModelSerializer):
    """A job as the API gives it. With `hidden` in its context (access.hidden_from), the jobs
    the reader may not see are left out of its dependencies and `resubmitted_from`, and a wait
    sentence naming one says less: a guardian grant shows an outsider one job, not its
    team's; with `mine` (the reader's tenants' ids), why a job of another tenant ended names
    none either (api.reading gives both)."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    priority_class = serializers.SlugRelatedField(slug_field="name", read_only=True)
    attempts = serializers.SerializerMethodField()
    depends_on = serializers.SerializerMethodField()
    dependencies = serializers.SerializerMethodField()
    pending_message = serializers.SerializerMethodField()
    end_reason = serializers.SerializerMethodField()
    eligible_at = serializers.SerializerMethodField()
    resubmitted_from = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "tenant", "owner", "name", "family", "image", "command", "env", "cpu_milli",
            "memory_mb", "gpus", "gpu_milli", "gpu_types", "first_type_wait_s",
            "cluster_selector", "exclude_nodes", "only_nodes",
            "features", "exclusive",
            "labels", "secrets", "volumes", "workers", "min_workers", "topology", "shards",
            "max_running_shards", "shard_index", "parent", "resubmitted_from",
            "priority_class", "priority", "preemptible", "max_runtime_s", "max_retries",
            "retry_user_errors", "retry_exit_codes", "notify_start", "notify_requeue",
            "notify_time_limit", "notify_email", "retries_used", "interruptions",
            "idempotency_key", "state", "held", "pending_reason", "pending_message",
            "end_reason", "estimated_start", "created", "begin",
            "deadline", "eligible_at", "scheduled_at", "started_at", "finished_at", "depends_on",
            "dependencies", "singleton", "attempts",
        ]  # fmt: skip
        read_only_fields = fields

    def get_depends_on(self, job) -> list[int]:
        """The ids alone, whatever their kinds (as before there were kinds)."""
        return [link["id"] for link in self.get_dependencies(job)]

    def get_dependencies(self, job) -> list[dict]:
        # Held by a batch's first shard for all its shards. Read once for both fields: through
        # the listing's prefetch, or one made here for a job read alone.
        prefetch_related_objects([job], "dependency_links")
        links = sorted(job.dependency_links.all(), key=lambda link: link.on_id)
        hidden = self.context.get("hidden", frozenset())
        return [{"id": link.on_id, "kind": link.kind} for link in links if link.on_id not in hidden]

    def get_eligible_at(self, job) -> str | None:
        since = job.eligible_since(timezone.now())
        return None if since is None else serializers.DateTimeField().to_representation(since)

    def get_pending_message(self, job) -> str:
        return access.wait_sentence(job, self.context.get("hidden", frozenset()))

    def get_end_reason(self, job) -> str:
        """Why it ended; read by an outsider (`mine`: the reader's tenants' ids), without the
        ids of its team's other jobs."""
        return access.end_reason(job, self.context.get("mine", ()))

    def get_resubmitted_from(self, job) -> int | None:
        hidden = self.context.get("hidden", frozenset())
        return None if job.resubmitted_from_id in hidden else job.resubmitted_from_id

    def get_attempts(self, job):
        attempts = list(job.attempts.all())
        # Where each ran, in two queries for a job read without them (api.visible reads them
        # with the jobs; attempts that have them are skipped).
        prefetch_related_objects(attempts, "allocations__node")
        now = timezone.now()
        return [
            {"number": a.number, "cluster": a.cluster.name if a.cluster else None,
             "workers": a.workers, "nodes": a.nodes(), "outcome": a.outcome,
             "exit_code": a.exit_code, "reason": a.reason, "stop_cause": a.stop_cause,
             "started_at": a.started_at, "ended_at": a.ended_at,
             **efficiency.of_attempt(a, job, now).document()}
            for a in attempts
        ]  # fmt: skip


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["time", "from_state", "to_state", "reason"]


class LogLineSerializer(serializers.ModelSerializer):
    attempt = serializers.IntegerField(source="attempt.number")

    class Meta:
        model = LogChunk
        fields = ["id", "attempt", "worker", "seq", "stream", "text"]
