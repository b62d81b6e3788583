"""The agents' HTTP API under /api/v1/agent/<cluster>/: thin views over clusters.agents.

Agents authenticate with `Authorization: Agent <token>`; the token is checked against the
cluster named in the URL, so it is good for that cluster only.
"""

import re

from django.contrib.auth.models import AnonymousUser
from django.urls import path
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import agents
from clusters.backends import base
from clusters.models import Cluster, validate_features, validate_topology
from jobs.fields import Choice, TextKeys


class AgentTokenAuthentication(BaseAuthentication):
    keyword = "Agent"

    def authenticate(self, request):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme != self.keyword or not token:
            return None
        name = request.parser_context["kwargs"].get("cluster")
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None or not cluster.token_matches(token):
            raise AuthenticationFailed("This token is not valid for this cluster.")
        return AnonymousUser(), cluster

    def authenticate_header(self, request):
        return self.keyword


class IsClusterAgent(BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.auth, Cluster)


INT32 = 2**31 - 1
INT64 = 2**63 - 1
MAX_TIMESTAMP = agents.MAX_TIMESTAMP  # the last second a datetime can hold
MAX_BUSY_S = 1000 * 100 * 365 * 86400  # a century of a thousand cores or GPUs


class AgentText(serializers.CharField):
    """Text a cluster reports (log lines, reasons): NUL and unpaired surrogates become U+FFFD
    and it is cut at ``cut_at`` characters, never refused: one worker's odd output must not
    get its whole batch, and with it the cluster's reports, turned away."""

    def __init__(self, *, cut_at: int, **kwargs):
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.cut_at = cut_at

    def to_internal_value(self, data):
        text = super().to_internal_value(data)[: self.cut_at]
        text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates
        return text.replace("\x00", "\ufffd")


class NodeSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=253)
    cpu_milli = serializers.IntegerField(min_value=0, max_value=INT32)
    memory_mb = serializers.IntegerField(min_value=0, max_value=INT32)
    gpu_type = serializers.CharField(max_length=64, allow_blank=True, default="")
    gpu_count = serializers.IntegerField(min_value=0, max_value=64, default=0)
    gpu_shareable = serializers.BooleanField(default=False)
    # Keys a job could name (Job.topology): another would land where no job could ask for it.
    topology = TextKeys(child=serializers.CharField(), default=dict, validators=[validate_topology])
    ready = serializers.BooleanField(default=True)
    # Why it is not ready, as the agent says it (an agent of an earlier release says nothing).
    not_ready = AgentText(default="", cut_at=300)
    # Names a job could require (Job.features); an agent of an earlier release sends none.
    features = serializers.ListField(
        child=serializers.CharField(max_length=63), default=list, validators=[validate_features]
    )

    def validate(self, data):
        if data["gpu_count"] and not data["gpu_type"]:
            raise serializers.ValidationError({"gpu_type": "Nodes with GPUs need a GPU type."})
        return data


PHASES = [base.PENDING, base.RUNNING, base.EXITED, base.FAILED, base.STOPPED, base.LOST,
          base.TIMED_OUT]  # fmt: skip


class LeftOut:
    """A field whose bad value is left out (None), never refused: what carries it is kept."""

    def run_validation(self, data=serializers.empty):
        try:
            return super().run_validation(data)  # type: ignore[misc]
        except serializers.ValidationError:
            return None


class LineStamp(LeftOut, serializers.FloatField):
    """When a log line was written, a worker started or its GPUs went idle (seconds since the
    epoch). One that is no time the database can hold is left out: the line or report is kept
    without it."""


class BusySeconds(LeftOut, serializers.FloatField):
    """A worker's CPU or GPU time so far. One that cannot be (negative, past a century of a
    thousand cores) is left out: the worker's report stands without it."""


class MemoryPeak(LeftOut, serializers.IntegerField):
    """A worker's memory high-water mark in MiB; a bad one is left out, as BusySeconds."""


class WorkerStatusSerializer(serializers.Serializer):
    attempt_id = serializers.IntegerField(min_value=1, max_value=INT64)
    rank = serializers.IntegerField(min_value=0, max_value=INT32)
    phase = Choice(choices=PHASES)
    exit_code = serializers.IntegerField(
        allow_null=True, default=None, min_value=-INT32 - 1, max_value=INT32
    )
    reason = AgentText(default="", cut_at=300)
    checkpoint_at = serializers.FloatField(
        allow_null=True, default=None, min_value=0, max_value=MAX_TIMESTAMP
    )
    started_at = LineStamp(allow_null=True, default=None, min_value=0, max_value=MAX_TIMESTAMP)
    cpu_seconds = BusySeconds(allow_null=True, default=None, min_value=0, max_value=MAX_BUSY_S)
    memory_peak_mb = MemoryPeak(allow_null=True, default=None, min_value=0, max_value=INT32)
    gpu_busy_seconds = BusySeconds(allow_null=True, default=None, min_value=0, max_value=MAX_BUSY_S)
    gpu_idle_since = LineStamp(allow_null=True, default=None, min_value=0, max_value=MAX_TIMESTAMP)

    def validate(self, data):
        # Exited: the process ended on its own, and only its code says whether the job did
        # its work or failed by its own fault.
        if data["phase"] == base.EXITED and data["exit_code"] is None:
            raise serializers.ValidationError({"exit_code": "An exited worker needs its code."})
        return data


class LogLineSerializer(serializers.Serializer):
    attempt_id = serializers.IntegerField(min_value=1, max_value=INT64)
    rank = serializers.IntegerField(min_value=0, max_value=INT32)
    seq = serializers.IntegerField(min_value=0, max_value=INT32)
    stream = Choice(choices=["stdout", "stderr"])
    text = AgentText(cut_at=base.MAX_LINE)
    at = LineStamp(allow_null=True, default=None, min_value=0, max_value=MAX_TIMESTAMP)


class InventorySerializer(serializers.Serializer):
    nodes = NodeSerializer(many=True, allow_empty=True)


def ranks_checked(items: list[dict], cluster, each_once: bool = True) -> list[dict]:
    """The items (workers, log lines), refused naming each one whose rank its attempt on this
    cluster cannot have (`agents.misreported_ranks`)."""
    ranks = [(item["attempt_id"], item["rank"]) for item in items]
    bad = agents.misreported_ranks(cluster, ranks, each_once)
    if bad:
        raise serializers.ValidationError({i: {"rank": [why]} for i, why in bad.items()})
    return items


class HeartbeatSerializer(serializers.Serializer):
    """Every worker the agent runs; `cluster` in the context: each rank is checked against the
    world size of that cluster's attempt."""

    workers = WorkerStatusSerializer(many=True, allow_empty=True)

    def validate_workers(self, workers):
        return ranks_checked(workers, self.context["cluster"])


class LogResumeAskSerializer(serializers.Serializer):
    attempt_id = serializers.IntegerField(min_value=1, max_value=INT64)
    rank = serializers.IntegerField(min_value=0, max_value=INT32)


def agent_clock(data) -> float | None:
    """The agent's time as it sent the heartbeat ("sent_at", seconds since the epoch), where
    it says one. A malformed one is left out, never refused: it must not cost the heartbeat."""
    sent = data.get("sent_at") if isinstance(data, dict) else None
    ok = isinstance(sent, int | float) and not isinstance(sent, bool)
    return float(sent) if ok and 0 < sent <= MAX_TIMESTAMP else None


def usage_epoch(data) -> str:
    """The run of counts the report's GPU-seconds are in ("usage_epoch", the backend's: up to
    64 letters, digits, - and _), where it says one; a malformed one is left out (its counts
    are then taken as before: never below what was counted), never refused."""
    epoch = data.get("usage_epoch") if isinstance(data, dict) else None
    ok = isinstance(epoch, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", epoch)
    return epoch if ok else ""


def spec_fields(data) -> list[str] | None:
    """The run spec's fields the agent keeps ("spec_fields"), in its heartbeat or inventory,
    where it says them; a malformed list is left out (what it said before stands), never
    refused."""
    named = data.get("spec_fields") if isinstance(data, dict) else None
    ok = isinstance(named, list) and len(named) <= 200
    if not ok or not all(isinstance(n, str) and re.fullmatch(r"[a-z0-9_]{1,64}", n) for n in named):
        return None
    return sorted(set(named))


def asked_log_resumes(data) -> list[tuple[int, int]]:
    """The (attempt, rank) whose log position a heartbeat asks for ("resume_logs"), as many as
    one beat answers. A malformed entry is left out, never refused: it must not cost the
    heartbeat it rides on (the agent asks again for what is not answered)."""
    asked = data.get("resume_logs") if isinstance(data, dict) else None
    keys = []
    for entry in asked[: agents.RESUMES_PER_BEAT] if isinstance(asked, list) else []:
        ask = LogResumeAskSerializer(data=entry)
        if ask.is_valid():
            keys.append((ask.validated_data["attempt_id"], ask.validated_data["rank"]))
    return keys


class LogsSerializer(serializers.Serializer):
    """A batch of log lines; `cluster` in the context: each line's rank is checked against the
    world size of that cluster's attempt (a rank past it would be stored as a worker the
    attempt never had)."""

    lines = LogLineSerializer(many=True, allow_empty=True, max_length=10_000)

    def validate_lines(self, lines):
        return ranks_checked(lines, self.context["cluster"], each_once=False)


def parsed(serializer_class, data, key: str, **context) -> list[dict]:
    """The validated list under `key`; a 400 naming the bad field otherwise."""
    serializer = serializer_class(data=data, context=context)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data[key]


class AgentView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsClusterAgent]
    throttle_classes = []  # the heartbeat is the control loop: never rate-limited


class InventoryView(AgentView):
    def post(self, request, cluster):
        nodes = [
            base.NodeInventory(**n) for n in parsed(InventorySerializer, request.data, "nodes")
        ]
        # Agents say which fields they keep in the inventory they start with too: one that
        # says none (null, or not at all) is taken for an older release taking over the
        # cluster, judged as one at once, not by what the agent it replaced said (one that
        # says them in its heartbeats alone is judged by the heartbeat of the same step).
        agents.record_inventory(
            request.auth,
            nodes,
            spec_fields(request.data),
            older_release=request.data.get("spec_fields") is None,
        )
        return Response({"nodes": len(nodes)})


class HeartbeatView(AgentView):
    def post(self, request, cluster):
        workers = parsed(HeartbeatSerializer, request.data, "workers", cluster=request.auth)
        state = agents.heartbeat(
            request.auth,
            [base.WorkerStatus(**w) for w in workers],
            resume_logs=asked_log_resumes(request.data),
            sent_at=agent_clock(request.data),
            usage_epoch=usage_epoch(request.data),
            spec_fields=spec_fields(request.data),
        )
        return Response(state)


class LogsView(AgentView):
    def post(self, request, cluster):
        lines = parsed(LogsSerializer, request.data, "lines", cluster=request.auth)
        stored = agents.store_logs(request.auth, [base.LogLine(**line) for line in lines])
        return Response({"stored": stored})


urlpatterns = [
    path("<slug:cluster>/inventory/", InventoryView.as_view(), name="agent-inventory"),
    path("<slug:cluster>/heartbeat/", HeartbeatView.as_view(), name="agent-heartbeat"),
    path("<slug:cluster>/logs/", LogsView.as_view(), name="agent-logs"),
]
