"""The REST API's shapes of what is asked of a job that exists: a change of its dependencies,
its priority, a batch's limit on its shards running at once, a training gang's fewest workers or
its labels; a requeue; a cancel of the jobs a filter names; and a resubmission."""

from collections import Counter

from rest_framework import serializers

from clusters.models import LABEL_KEY, validate_labels
from jobs.dependencies import MAX_DEPENDENCIES
from jobs.fields import (
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_SHARDS,
    Choice,
    DependencyItem,
    StrictFields,
    TextKeys,
    at_most,
)
from jobs.serializers import (
    LARGEST_ID,
    cluster_selector_field,
    dependency_problem,
    features_field,
    first_type_wait_field,
    gpu_types_field,
    max_retries_field,
    max_runtime_field,
    min_workers_field,
    node_names_field,
    priority_class_named,
    request_field,
    retry_exit_codes_field,
)
from jobs.states import State


class DependenciesSerializer(StrictFields, serializers.Serializer):
    """A queued job's dependencies as they are to be from now on (Slurm's `scontrol update
    dependency=`), in a submission's forms, replacing all it had: `depends_on` ([] for none)
    and `singleton` (false unless given). The rules of a submission's depends_on hold; those
    that ask the job's state and the jobs it would wait for are asked under lock
    (jobs.actions.set_dependencies)."""

    depends_on = serializers.ListField(child=DependencyItem(), max_length=MAX_DEPENDENCIES)
    singleton = serializers.BooleanField(default=False)

    def __init__(self, *args, job=None, jobs=None, **kwargs):
        """`job`: the job changed; `jobs`: those the caller can see (only those may be named)."""
        super().__init__(*args, **kwargs)
        self.job, self.jobs = job, jobs

    def validate(self, data):
        if problem := dependency_problem(data["depends_on"], self.job.tenant, self.jobs):
            raise serializers.ValidationError({"depends_on": problem})
        return data


class PrioritySerializer(StrictFields, serializers.Serializer):
    """A queued job's priority from now on (Slurm's `scontrol update priority=`, Armada's
    reprioritize): its `priority_class`, its `priority` within the class, or both; a class
    open to the job's tenant, as at submit."""

    priority_class = serializers.SlugField(required=False)
    priority = serializers.IntegerField(required=False, min_value=-1000, max_value=1000)

    def __init__(self, *args, job=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.job = job

    def validate_priority_class(self, name):
        return priority_class_named(name)

    def validate(self, data):
        if not data:
            raise serializers.ValidationError("Give priority_class, priority or both.")
        chosen = data.get("priority_class")
        if chosen is not None and not chosen.open_to(self.job.tenant):
            message = f"Tenant {self.job.tenant.slug!r} may not run jobs at {chosen.name!r}."
            raise serializers.ValidationError({"priority_class": message})
        if chosen is not None and (too_long := chosen.runtime_refusal(self.job.max_runtime_s)):
            message = f"Job #{self.job.pk} asks for {self.job.max_runtime_s} s. {too_long}"
            raise serializers.ValidationError({"priority_class": message})
        return data


class ShardLimitSerializer(StrictFields, serializers.Serializer):
    """A batch's limit on its shards running at once from now on (Slurm's `scontrol update
    ArrayTaskThrottle=`): a number from 1, or null for none. Whether the job is a batch that
    still lives is asked by jobs.actions.set_shard_limit."""

    max_running_shards = serializers.IntegerField(
        min_value=1, max_value=MAX_SHARDS, allow_null=True
    )


class MinWorkersSerializer(StrictFields, serializers.Serializer):
    """A queued training job's fewest workers from now on (Slurm's `scontrol update
    NumNodes=MIN-MAX` for a pending job): a number from 1, or null for all of them together
    (rigid). Whether it fits the job, and the job is queued, is asked by
    jobs.actions.set_min_workers."""

    min_workers = min_workers_field()


class RuntimeLimitSerializer(StrictFields, serializers.Serializer):
    """A job's runtime limit from now on (Slurm's `scontrol update TimeLimit=`), in seconds as
    at submit. Whether its class allows it, its deadline can still be met and the job takes it
    (queued, or placed and lowered) is asked by jobs.actions.set_runtime_limit."""

    max_runtime_s = max_runtime_field()


class SomeOf(StrictFields, serializers.Serializer):
    """A change of some of a job's fields, one at least: `about` says what they are."""

    about = ""

    def validate(self, data):
        if not data:
            names = list(self.fields)
            raise serializers.ValidationError(
                f"Give {', '.join(names[:-1])} or {names[-1]}, or several: {self.about}."
            )
        return data


class RequestSerializer(SomeOf):
    """A queued job's request per worker from now on (Slurm's `scontrol update` of a pending
    job's NumCPUs, MinMemoryNode and Gres): any of cpu_milli, memory_mb, gpus and gpu_milli,
    within a submission's bounds, the others as they are; one at least. Whether the whole
    request is one a job of its family may make, and the job is queued, is asked by
    jobs.actions.change_request."""

    cpu_milli = request_field("cpu_milli", required=False)
    memory_mb = request_field("memory_mb", required=False)
    gpus = request_field("gpus", required=False)
    gpu_milli = request_field("gpu_milli", required=False)
    about = "what each worker asks for"


class ConstraintsSerializer(SomeOf):
    """Where a queued job may run from now on (Slurm's `scontrol update` of a pending job's
    Features, Partition and ExcNodeList): its GPU types, most preferred first, its cluster
    selector, the nodes it excludes, the nodes it runs on alone, the features its nodes must
    offer, how long it takes its first GPU type alone and whether each worker takes a node to
    itself, any of them, as a submission gives them (empty: any, none excluded, any node, none
    required; null: no wait); one at least."""

    gpu_types = gpu_types_field(required=False)
    cluster_selector = cluster_selector_field(required=False)
    exclude_nodes = node_names_field(required=False)
    only_nodes = node_names_field(required=False)
    features = features_field(required=False)
    first_type_wait_s = first_type_wait_field(required=False)
    exclusive = serializers.BooleanField(required=False)
    about = "where the job may run"


class RetriesSerializer(SomeOf):
    """What a job that has not ended retries from now on: any of max_retries,
    retry_user_errors and retry_exit_codes, as a submission gives them; one at least."""

    max_retries = max_retries_field(required=False)
    retry_user_errors = serializers.BooleanField(required=False)
    retry_exit_codes = retry_exit_codes_field(required=False)
    about = "what the job retries"

    def validate(self, data):
        data = super().validate(data)
        if "retry_exit_codes" in data:
            data["retry_exit_codes"] = sorted(data["retry_exit_codes"])
        return data


class NotificationsSerializer(SomeOf):
    """What a job is told of from now on (Slurm's `scontrol update MailType= MailUser=`): any
    of its notify fields, as a submission gives them; one at least."""

    notify_start = serializers.BooleanField(required=False)
    notify_requeue = serializers.BooleanField(required=False)
    notify_time_limit = serializers.BooleanField(required=False)
    notify_email = serializers.BooleanField(required=False)
    about = "what the job is told of"


class RelabelSerializer(StrictFields, serializers.Serializer):
    """A change of a job's labels (`kubectl label`): `labels` to set (a value replaces the one
    its key had) and `remove`, keys to drop; one of them at least. How many the job is left
    with is checked by jobs.actions.relabel."""

    labels = TextKeys(
        child=serializers.CharField(max_length=MAX_LABEL_VALUE, allow_blank=True),
        required=False,
        validators=[validate_labels, at_most(MAX_LABELS, "labels")],
    )
    remove = serializers.ListField(
        child=serializers.RegexField(rf"\A{LABEL_KEY}\Z"), required=False,
        max_length=MAX_LABELS,
    )  # fmt: skip

    def validate(self, data):
        if not (data.get("labels") or data.get("remove")):
            raise serializers.ValidationError({"labels": ["Give labels to set, keys to remove, "
                                                          "or both."]})  # fmt: skip
        if both := sorted(set(data.get("labels", {})) & set(data.get("remove", []))):
            raise serializers.ValidationError(
                {"remove": [f"{both[0]!r} is both set and removed: give it once."]}
            )
        return data


class RequeueSerializer(StrictFields, serializers.Serializer):
    """A requeue's options (Slurm's `scontrol requeue`, `requeuehold`): `hold`, to keep the job
    in the queue until it is released (false by default). Whether the job runs is asked by
    jobs.actions.requeue."""

    hold = serializers.BooleanField(default=False)


MAX_CANCELED = 10_000  # jobs one cancel request ends; the caller asks again for more


class CancelJobsSerializer(StrictFields, serializers.Serializer):
    """The jobs a cancel names, as Slurm's scancel filters them: any of `ids`, a `name`, a
    `state`, a `tenant`, `labels` (the jobs carrying every one of them) and `mine` (the
    caller's own), each given narrowing the rest. A state alone would name every live job the
    caller may cancel: one of the others is needed."""

    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=LARGEST_ID),
        required=False,
        allow_empty=False,
        max_length=MAX_CANCELED,
    )
    name = serializers.CharField(max_length=200, required=False)
    state = Choice(choices=[State.QUEUED, State.SCHEDULED, State.RUNNING], required=False)
    tenant = serializers.SlugField(required=False)
    mine = serializers.BooleanField(default=False)
    labels = TextKeys(
        child=serializers.CharField(max_length=MAX_LABEL_VALUE, allow_blank=True),
        required=False,
        allow_empty=False,
        validators=[validate_labels, at_most(MAX_LABELS, "labels")],
    )

    def validate(self, data):
        if not (data.keys() & {"ids", "name", "tenant", "labels"} or data["mine"]):
            raise serializers.ValidationError(
                "Name the jobs: ids, name, tenant, labels or mine (a state alone would name "
                "every live job you may cancel)."
            )
        return data


# A resubmission's `shards`: the shards of the batch that did not succeed (failed or canceled).
UNSUCCEEDED = "unsucceeded"


class ShardChoice(serializers.Field):
    """Which shards of a batch a resubmission runs again: UNSUCCEEDED, or a list of shard
    indexes ([3, 17, 512]), each named once."""

    SHAPE = f'"{UNSUCCEEDED}", or a list of shard indexes such as [3, 17, 512].'
    indexes = serializers.IntegerField(min_value=0)

    def to_internal_value(self, data) -> str | list[int]:
        if data == UNSUCCEEDED:
            return data
        if not isinstance(data, list) or not data or len(data) > MAX_SHARDS:
            raise serializers.ValidationError(self.SHAPE)
        if any(isinstance(item, bool) for item in data):  # true would be shard 1
            raise serializers.ValidationError(self.SHAPE)
        asked = [self.indexes.run_validation(item) for item in data]
        if twice := sorted(index for index, n in Counter(asked).items() if n > 1):
            raise serializers.ValidationError(f"Shard {twice[0]} is named twice.")
        return sorted(asked)

    def to_representation(self, value):
        return value


class ResubmitSerializer(StrictFields, serializers.Serializer):
    """What a resubmission may say: an idempotency key (a repeated request answers the job it
    made), and, for a batch, `shards`: which of its shards to run again, each keeping its index
    (ShardChoice). The rules that read the shards' states are asked by
    jobs.actions.check_resubmittable."""

    idempotency_key = serializers.CharField(
        max_length=128, required=False, allow_blank=True, allow_null=True
    )
    shards = ShardChoice(required=False, allow_null=True)

    def __init__(self, *args, job=None, **kwargs):
        """`job`: the job resubmitted."""
        super().__init__(*args, **kwargs)
        self.job = job

    def validate_shards(self, asked):
        job = self.job
        if asked is None:  # as if not given: the job whole
            return None
        if job.parent_id is not None:
            raise serializers.ValidationError(
                f"Job #{job.pk} is shard {job.shard_index} of batch #{job.parent_id}: name "
                f"the shards to rerun on the batch, #{job.parent_id}."
            )
        if not job.is_batch:
            raise serializers.ValidationError(
                f"Job #{job.pk} is not a batch: resubmit it without shards."
            )
        if asked != UNSUCCEEDED and (beyond := [i for i in asked if i >= job.shards]):
            raise serializers.ValidationError(
                f"Batch #{job.pk} has no shard {beyond[0]}: its shards are 0 to {job.shards - 1}."
            )
        return asked
