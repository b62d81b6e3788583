"""`manage.py run_agent --cluster NAME`: the cluster agent.

`--backend local` (the default) runs workers as processes on this host; `--backend kubernetes`
runs them as pods through the Kubernetes API (kubeconfig from --kubeconfig, else the in-cluster
service account). It talks to the control plane over HTTP with the cluster's token
(MLSCHED_AGENT_TOKEN, or --token-file) and never opens the database.
"""

import argparse
import math
import os
import re
import signal
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from clusters.agent.client import ControlPlane
from clusters.agent.health import HealthCheck
from clusters.agent.runner import Agent
from clusters.backends.local import LocalBackend, detect_inventory, parse_inventory
from clusters.models import TOPOLOGY_KEY_RULE, is_topology_key


class Command(BaseCommand):
    help = "Run the cluster agent for one cluster."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--url", default=os.environ.get("MLSCHED_URL", "http://127.0.0.1:8000"))
        parser.add_argument("--token-file", help="File holding the agent token.")
        parser.add_argument("--inventory", default="", help="Virtual inventory, e.g. 2x8xA100.")
        parser.add_argument("--state-dir", help="Where worker state is kept (survives restarts).")
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument(
            "--worker-uids",
            type=uid_range,
            metavar="FIRST-LAST",
            help="For --backend local, run as root: each tenant's workers run as the user "
            "FIRST + the tenant's id, so tenants cannot read each other's files or the agent's "
            "token (default: every worker runs as this agent's user).",
        )
        parser.add_argument("--health-check", default="", metavar="COMMAND",
                            help="A node health check (Slurm's HealthCheckProgram, NHC): run "
                                 "with /bin/sh -c for each node, named in MLSCHED_NODE; a node "
                                 "whose check does not exit 0 takes no new work, its last line "
                                 "of output said as why, until a check passes (default: "
                                 "none).")  # fmt: skip
        parser.add_argument("--health-check-interval", type=positive_seconds, default=300.0,
                            metavar="SECONDS", help="How often each node is checked.")  # fmt: skip
        parser.add_argument("--health-check-timeout", type=positive_seconds, default=60.0,
                            metavar="SECONDS",
                            help="A check running this long is killed and fails.")  # fmt: skip
        parser.add_argument("--backend", choices=["local", "kubernetes"], default="local")
        parser.add_argument("--kubeconfig", help="For --backend kubernetes; default in-cluster.")
        parser.add_argument(
            "--checkpoint-claim",
            help="For --backend kubernetes: the PersistentVolumeClaim mounted in "
            "every pod for checkpoints (default: none).",
        )
        parser.add_argument("--checkpoint-mount",
                            help="For --backend kubernetes: where this agent mounts the same "
                                 "volume, to read when jobs last checkpointed.")  # fmt: skip
        parser.add_argument("--not-ready-grace", type=positive_seconds, default=300.0,
                            metavar="SECONDS",
                            help="For --backend kubernetes: how long pods on a NotReady node "
                                 "count as still running before they are lost.")  # fmt: skip
        parser.add_argument("--mount-failure", type=positive_seconds, default=60.0,
                            metavar="SECONDS",
                            help="For --backend kubernetes: how long the kubelet must have "
                                 "kept failing to mount a Secret, ConfigMap or claim that is "
                                 "not there, or a claim's volume to attach, before the worker "
                                 "fails, the platform's fault.")  # fmt: skip
        parser.add_argument("--gpu-metrics", default=None, metavar="NAMESPACE/SELECTOR:PORT",
                            help="For --backend kubernetes: where the DCGM exporters run, read "
                                 "for GPU time (default gpu-operator/app=nvidia-dcgm-exporter:"
                                 "9400, the GPU Operator's; '' reads none).")  # fmt: skip
        parser.add_argument("--topology-label", action="append", metavar="KEY=NODE_LABEL",
                            help="For --backend kubernetes: report each node's value of its "
                                 "label NODE_LABEL as its topology KEY, the key a training "
                                 "gang names to keep its nodes in one value of (again for "
                                 "more; given, it replaces the defaults: zone, rack, "
                                 "nvlink).")  # fmt: skip
        parser.add_argument("--tolerate-taint", action="append", metavar="KEY",
                            help="For --backend kubernetes: the workers' pods tolerate node "
                                 "taints of this key (again for more), as nodes set apart "
                                 "for mlsched's work with a NoExecute or NoSchedule taint "
                                 "need; a node tainted so with another key takes no "
                                 "work.")  # fmt: skip
        parser.add_argument("--unhealthy-condition", action="append", metavar="TYPE",
                            help="For --backend kubernetes: a node condition type that, True, "
                                 "keeps new work off the node, its reason and message said as "
                                 "why (again for more): node-problem-detector's KernelDeadlock, "
                                 "ReadonlyFilesystem, a GPU checker's.")  # fmt: skip
        parser.add_argument("--gpu-runtime-class", default="", metavar="NAME",
                            help="For --backend kubernetes: the RuntimeClass of the workers "
                                 "with GPUs (nvidia on k3s, and where the GPU Operator does not "
                                 "make the NVIDIA runtime the nodes' default).")  # fmt: skip
        parser.add_argument("--no-network-isolation", action="store_true",
                            help="For --backend kubernetes: make no NetworkPolicy in tenant "
                                 "namespaces (the platform isolates them itself).")  # fmt: skip

    def handle(self, *args, cluster, url, token_file, inventory, state_dir, interval, backend,
               kubeconfig, checkpoint_claim, checkpoint_mount, not_ready_grace, mount_failure,
               no_network_isolation, worker_uids, gpu_metrics, topology_label, tolerate_taint,
               gpu_runtime_class, unhealthy_condition, health_check, health_check_interval,
               health_check_timeout, **options):  # fmt: skip
        health = (
            HealthCheck(health_check, health_check_interval, health_check_timeout)
            if health_check.strip()
            else None
        )
        token = Path(token_file).read_text().strip() if token_file else None
        token = token or os.environ.get("MLSCHED_AGENT_TOKEN", "")
        if not token:
            raise CommandError("no agent token: set MLSCHED_AGENT_TOKEN or pass --token-file")
        if topology_label and backend != "kubernetes":
            raise CommandError("--topology-label is for --backend kubernetes (local: host)")
        if tolerate_taint and backend != "kubernetes":
            raise CommandError("--tolerate-taint is for --backend kubernetes")
        if unhealthy_condition and backend != "kubernetes":
            raise CommandError("--unhealthy-condition is for --backend kubernetes")
        for kind in unhealthy_condition or []:
            if not re.fullmatch(CONDITION_TYPE, kind) or kind == "Ready":
                raise CommandError(f"--unhealthy-condition {kind!r}: TYPE is no condition's type")
        if gpu_runtime_class and backend != "kubernetes":
            raise CommandError("--gpu-runtime-class is for --backend kubernetes")
        if gpu_runtime_class and not re.fullmatch(DNS_SUBDOMAIN, gpu_runtime_class):
            raise CommandError(f"--gpu-runtime-class {gpu_runtime_class!r}: NAME is no "
                               "RuntimeClass's name")  # fmt: skip
        for key in tolerate_taint or []:
            if not re.fullmatch(NODE_LABEL, key):
                raise CommandError(f"--tolerate-taint {key!r}: KEY is no taint's key")
        if backend == "kubernetes":
            from clusters.backends.k8s_usage import GPU_OPERATOR, Exporters

            try:
                exporters = GPU_OPERATOR if gpu_metrics is None else Exporters.parse(gpu_metrics)
            except ValueError as refusal:
                raise CommandError(f"--gpu-metrics: {refusal}") from None
            labels = topology_labels(topology_label)
            control = ControlPlane(url, cluster, token)
            kube = kubernetes_backend(
                cluster, kubeconfig, checkpoint_claim, checkpoint_mount,
                not_ready_grace_s=not_ready_grace, mount_failure_s=mount_failure,
                isolate_namespaces=not no_network_isolation,
                gpu_exporters=exporters, topology_labels=labels,
                tolerated_taints=tuple(tolerate_taint or ()), gpu_runtime_class=gpu_runtime_class,
                unhealthy_conditions=tuple(unhealthy_condition or ()),
            )  # fmt: skip
            agent = Agent(control, kube, interval, health=health)
        else:
            if worker_uids is not None and os.geteuid() != 0:
                raise CommandError("--worker-uids needs the agent to run as root")
            try:
                agent = build_agent(
                    cluster, url, token, inventory, state_dir, interval, worker_uids, health
                )
            except ValueError as refusal:  # an inventory, or directories workers cannot reach
                raise CommandError(str(refusal)) from None
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        self.stdout.write(f"agent for {cluster} reporting to {url}")
        self.stdout.flush()
        agent.run_forever(stop)


def uid_range(text: str) -> range:
    """`FIRST-LAST`, both user ids, FIRST above 0."""
    first, _, last = text.partition("-")
    if not (first.isdigit() and last.isdigit() and 0 < int(first) <= int(last)):
        raise argparse.ArgumentTypeError(f"user ids FIRST-LAST, e.g. 20000-29999: {text!r}")
    return range(int(first), int(last) + 1)


def positive_seconds(text: str) -> float:
    """A number of seconds above 0, e.g. 90 or 2.5."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds < math.inf):
        raise argparse.ArgumentTypeError(f"a number of seconds above 0, e.g. 90: {text!r}")
    return seconds


# A Kubernetes object's name of the DNS subdomain kind (a RuntimeClass's).
DNS_SUBDOMAIN = r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?"
# A node condition's type: CamelCase by convention (KernelDeadlock), a domain before a "/" in
# some checkers' (Kubernetes does not check it).
CONDITION_TYPE = r"[A-Za-z0-9][A-Za-z0-9_./-]{0,315}"
# A Kubernetes label's key: an optional DNS subdomain prefix and "/", then its name.
NODE_LABEL = (
    r"([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?"  # prefix
    r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"  # name
)


def topology_labels(pairs: list[str] | None) -> dict[str, str] | None:
    """`--topology-label KEY=NODE_LABEL`s as a mapping of topology keys to node labels (None:
    none given, the backend's defaults). A KEY no job could ask for is refused here, at start,
    rather than by every inventory the control plane would turn away."""
    if not pairs:
        return None
    labels: dict[str, str] = {}
    for pair in pairs:
        key, _, label = pair.partition("=")
        if not is_topology_key(key):
            raise CommandError(f"--topology-label {pair!r}: KEY is no key a job could ask "
                               f"for: {TOPOLOGY_KEY_RULE}")  # fmt: skip
        if not re.fullmatch(NODE_LABEL, label):
            raise CommandError(f"--topology-label {pair!r}: NODE_LABEL is no node label's key "
                               "(mlsched.io/rack, topology.kubernetes.io/zone)")  # fmt: skip
        if key in labels:
            raise CommandError(f"--topology-label: {key} is given twice")
        labels[key] = label
    return labels


def build_agent(
    cluster, url, token, inventory="", state_dir=None, interval=1.0, worker_uids=None, health=None
) -> Agent:
    """An agent with the local backend; shared by run_agent and the embedded server."""
    root = Path(state_dir) if state_dir else settings.VAR_DIR / "agents" / cluster
    nodes = parse_inventory(inventory, cluster) if inventory else detect_inventory(cluster)
    backend = LocalBackend(
        root / "workers", nodes, settings.VAR_DIR / "checkpoints", worker_uids=worker_uids,
        measure_gpus=not inventory,  # a virtual inventory's GPUs are no real ones
    )  # fmt: skip
    return Agent(ControlPlane(url, cluster, token), backend, interval, health=health)


def kubernetes_backend(
    cluster: str, kubeconfig: str | None, checkpoint_claim=None, checkpoint_mount=None, **options
):
    from kubernetes import client, config

    from clusters.backends.kubernetes import KubernetesBackend

    if kubeconfig:
        api = config.new_client_from_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
        api = client.ApiClient()
    return KubernetesBackend(
        api, cluster, checkpoint_claim=checkpoint_claim, checkpoint_mount=checkpoint_mount,
        **options,
    )  # fmt: skip
