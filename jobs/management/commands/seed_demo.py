"""Fill an empty database with a demo tenant, users, priority classes and two clusters."""

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


class Command(BaseCommand):
    help = "Create demo data on an empty database and print the credentials."

    def handle(self, *args, **options):
        credentials = settings.VAR_DIR / "demo-credentials.txt"
        if Tenant.objects.exists():
            self.stdout.write(recalled(credentials))
            return
        with transaction.atomic():
            text = seed()
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
