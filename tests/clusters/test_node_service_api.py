"""A platform admin's cordon, drain and uncordon of one node through the API and the CLI
(Slurm's `scontrol update NodeName= State=DRAIN|RESUME Reason=`): what a health checker or a
maintenance script does without the admin's pages, as the admin's node list does it."""

import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from clusters.models import Node
from jobs.models import Attempt
from quotas.tokens import create_token
from tests.factories import NodeFactory
from tests.processes import ROOT

pytestmark = pytest.mark.django_db


@pytest.fixture
def platform_admin(db):
    return get_user_model().objects.create_superuser("root", "root@example.com", "pw")


def as_user(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def cli_of(live_server, user, read_only: bool = False):
    """The command line against the live server, as `user` (with a token of theirs)."""
    _, token = create_token(user, "ops", read_only=read_only)

    def run(*args):
        env = {"MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token, "PATH": "/usr/bin:/bin"}
        return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    return run


def service(user, cluster, node, verb, **body):
    return as_user(user).post(f"/api/v1/nodes/{cluster}/{node}/{verb}/", body, format="json")


def test_a_drain_cordons_the_node_and_asks_its_work_to_stop_saying_why(platform_admin, gang):
    attempt = gang.attempts.get()

    answer = service(platform_admin, "east", "east-0", "drain", reason="bad DIMM")

    node = Node.objects.get(name="east-0")
    assert answer.status_code == 200, answer.json()
    assert (answer.json()["changed"], answer.json()["stopped"]) == (1, 1)
    assert answer.json()["state"] == "draining"
    assert answer.json()["reason"].startswith("bad DIMM (root, ")
    assert (node.schedulable, node.cordon_reason, node.cordoned_by) == (False, "bad DIMM", "root")
    assert Attempt.objects.get(pk=attempt.pk).stop_requested_at is not None


def test_a_cordon_then_an_uncordon_put_a_node_out_of_and_back_in_service(platform_admin, east):
    NodeFactory(cluster=east, name="gpu-0")

    cordoned = service(platform_admin, "east", "gpu-0", "cordon", reason="flaky NCCL")
    again = service(platform_admin, "east", "gpu-0", "cordon")
    back = service(platform_admin, "east", "gpu-0", "uncordon")

    assert (cordoned.json()["changed"], cordoned.json()["state"]) == (1, "drained")
    assert again.json()["changed"] == 0  # already cordoned: its reason is kept
    assert again.json()["reason"].startswith("flaky NCCL (root, ")
    assert (back.json()["changed"], back.json()["state"], back.json()["reason"]) == (1, "idle", "")
    assert Node.objects.get(name="gpu-0").schedulable


def test_anyone_else_is_refused_and_nothing_changes(alice, east):
    NodeFactory(cluster=east, name="gpu-0")

    refused = service(alice, "east", "gpu-0", "drain", reason="mine")

    assert refused.status_code == 403
    assert refused.json()["detail"] == "Only a platform admin may drain a node."
    assert Node.objects.get(name="gpu-0").schedulable


def test_an_unknown_node_is_a_404_and_a_long_reason_a_400(platform_admin, east):
    NodeFactory(cluster=east, name="gpu-0")

    unknown = service(platform_admin, "west", "gpu-0", "cordon")
    long = service(platform_admin, "east", "gpu-0", "cordon", reason="x" * 201)

    assert unknown.status_code == 404
    assert long.status_code == 400 and list(long.json()) == ["reason"]
    assert Node.objects.get(name="gpu-0").schedulable


@pytest.mark.django_db(transaction=True)
def test_the_cli_drains_and_uncordons_a_node(live_server, east, platform_admin):
    NodeFactory(cluster=east, name="gpu-0")
    cli = cli_of(live_server, platform_admin)

    drained = cli("drain", "east", "gpu-0", "--reason", "bad DIMM")
    back = cli("uncordon", "east", "gpu-0")

    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.startswith("east/gpu-0: drained, 0 attempts asked to stop; now drained "
                                     "(bad DIMM (root, ")  # fmt: skip
    assert back.stdout == "east/gpu-0: uncordoned; now idle\n"
