"""Fill an empty database with a demo tenant, users, priority classes and two clusters, and
submit the demo user's example jobs: a training gang, a batch inference of four shards and an
evaluation waiting for the training, which the embedded server runs at once."""

import re
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from clusters.agents import record_inventory
from clusters.backends.local import parse_inventory
from clusters.models import Cluster
from jobs import access, actions
from jobs.serializers import SubmitSerializer
from quotas.models import Membership, PriorityClass, Quota, Tenant

PRIORITY_CLASSES = [
    ("critical", 1000, True, "Production-critical work; may preempt lower tiers."),
    ("high", 100, True, "Deadlines; may preempt lower tiers."),
    ("normal", 0, False, "The default."),
    ("low", -100, False, "Runs when there is room."),
    ("best-effort", -1000, False, "Scavenges idle capacity; first to be preempted."),
]

# (cluster, region, the virtual inventory its embedded local agent reports)
DEMO_CLUSTERS = [
    ("a100-east", "us-east", "2x8xA100"),
    ("t4-west", "us-west", "4x1xT4:shared"),
]

# The demo team alone in its cohort has no one to borrow from: its guarantees are the demo
# clusters' whole capacity (two A100 nodes of 64 cores and 512 GiB, four T4 nodes of 8 cores
# and 64 GiB), so that a gang over both A100 nodes can run (a larger one waits
# as quota_exceeded, as quotas work).
DEMO_QUOTAS = [
    ("cpu", 160_000, 0),
    ("memory", 1_310_720, 0),
    ("gpu:A100", 16, 0),
    ("gpu:T4", 4, 0),
]


# The demo user's example jobs: what each family looks like running, with live logs, each
# a short Python program (the local backend runs it on the host). A batch's shard takes its
# part by MLSCHED_SHARD_INDEX; a gang's worker is RANK of WORLD_SIZE and says when it saved a
# checkpoint; the evaluation waits for the training to succeed.
TRAIN = """import os, time
rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
for step in range(1, 11):
    time.sleep(1)
    print(f"rank {rank} of {world}: step {step}/10, loss {2.0 / step:.3f}", flush=True)
    if step % 5 == 0 and rank == "0":
        print(os.environ["MLSCHED_CHECKPOINT_LINE"], flush=True)
"""
INFER = """import os, time
shard, shards = int(os.environ["MLSCHED_SHARD_INDEX"]), int(os.environ["MLSCHED_SHARDS"])
rows = range(shard * 250, (shard + 1) * 250)
for n in range(5):
    time.sleep(1)
    print(f"shard {shard} of {shards}: {50 * (n + 1)} of {len(rows)} rows scored", flush=True)
"""
EVALUATE = """import time
time.sleep(2)
print("accuracy 0.913 on 2,000 held-out examples", flush=True)
"""
EXAMPLE = {"tenant": "demo", "image": "python:3.11", "cpu_milli": 1000, "memory_mb": 2048,
           "max_runtime_s": 600, "labels": {"project": "example"}}  # fmt: skip


def python(program: str) -> list[str]:
    return ["python3", "-c", program]


EXAMPLES = [
    {"name": "example-train", "family": "training", "command": python(TRAIN), "gpus": 1,
     "gpu_types": ["A100"], "workers": 2},
    {"name": "example-inference", "family": "batch_inference", "command": python(INFER),
     "gpu_milli": 500, "gpu_types": ["T4"], "shards": 4},
    {"name": "example-eval", "family": "evaluation", "command": python(EVALUATE), "gpus": 1,
     "gpu_types": ["A100"]},
]  # fmt: skip


class Command(BaseCommand):
    help = "Create demo data on an empty database and print the credentials."

    def handle(self, *args, **options):
        credentials = settings.VAR_DIR / "demo-credentials.txt"
        if Tenant.objects.exists():
            self.stdout.write(recalled(credentials))
            return
        with transaction.atomic():
            text = seed()
            examples()
        credentials.write_text(text)
        credentials.chmod(0o600)
        self.stdout.write(text)


CREDENTIAL = re.compile(r"^(?P<head>.*?: *(?P<user>\S+) / )(?P<password>\S+)(?P<tail>.*)$")
GONE = (
    "The demo's first passwords are not kept any more ({path}): a platform admin sets one with "
    "`.venv/bin/python manage.py changepassword USER`.\n"
)


def recalled(credentials: Path) -> str:
    """The credentials written when the demo was seeded, as far as they still sign in: a
    password changed since is not shown (it would be wrong)."""
    if not credentials.exists():
        return GONE.format(path=credentials)
    users = get_user_model().objects
    lines = []
    for line in credentials.read_text().splitlines():
        match = CREDENTIAL.match(line)
        user = match and users.filter(username=match["user"]).first()
        if match and not (user and user.check_password(match["password"])):
            line = f"{match['head']}(changed since the demo was created){match['tail']}"
        lines.append(line + "\n")
    return "".join(lines)


def seed() -> str:
    for name, value, may_preempt, description in PRIORITY_CLASSES:
        PriorityClass.objects.create(
            name=name, value=value, may_preempt=may_preempt, description=description
        )
    tenant = Tenant.objects.create(name="Demo team", slug="demo")
    tenant.priority_classes.set(PriorityClass.objects.filter(may_preempt=True))
    for flavor, guaranteed, borrow in DEMO_QUOTAS:
        Quota.objects.create(
            tenant=tenant, flavor=flavor, guaranteed=guaranteed, borrow_limit=borrow
        )
    for name, region, inventory in DEMO_CLUSTERS:
        cluster = Cluster.objects.create(name=name, region=region, labels={"region": region})
        # The embedded agent registers the same nodes when it starts.
        record_inventory(cluster, parse_inventory(inventory, name))
    users = get_user_model().objects
    demo_password, admin_password = secrets.token_urlsafe(9), secrets.token_urlsafe(9)
    demo = users.create_user("demo", password=demo_password)
    Membership.objects.create(tenant=tenant, user=demo, role=Membership.Role.OWNER)
    users.create_superuser("admin", password=admin_password)
    return (
        f"Demo user:  demo / {demo_password}  (tenant 'demo')\n"
        f"Admin user: admin / {admin_password}\n"
    )


def examples() -> list:
    """Submit the demo user's example jobs as the API does (its checks, its verb), the
    evaluation waiting for the training to succeed: the jobs, in order."""
    demo = get_user_model().objects.get(username="demo")
    submitted = []
    for example in EXAMPLES:
        body = EXAMPLE | example
        if example["family"] == "evaluation":
            body["depends_on"] = [submitted[0].pk]  # afterok
        checked = SubmitSerializer(
            data=body,
            tenants=access.submit_tenants(demo),
            jobs=access.visible_jobs(demo),
            user=demo,
        )
        checked.is_valid(raise_exception=True)
        spec = dict(checked.validated_data)
        submitted.append(actions.submit(demo, spec.pop("tenant"), spec)[0])
    return submitted
