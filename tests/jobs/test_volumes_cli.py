"""Data volumes on the command line, against a live server as a user runs it: `submit
--volume NAME:PATH[:rw]` adds to the job's volumes, `volumes [--tenant SLUG]` lists the teams'
volumes as a table, and `status` shows a job's."""

import json

import pytest

from jobs.models import Job
from quotas.models import Membership
from tests.factories import (
    ClusterFactory,
    JobFactory,
    MembershipFactory,
    TenantFactory,
    TenantVolumeFactory,
)
from tests.jobs.test_booking_cli import cells
from tests.jobs.test_cli import SPEC, cli  # noqa: F401 - the fixture, for the command line's tests

pytestmark = pytest.mark.django_db(transaction=True)


def test_submit_adds_each_volume_option_to_the_jobs_volumes(cli, alpha):  # noqa: F811
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    TenantVolumeFactory(tenant=alpha, name="scratch", writable=True)
    TenantVolumeFactory(tenant=alpha, name="weights")
    spec = {**SPEC, "volumes": [{"name": "weights", "path": "/weights"}]}

    done = cli("submit", "-", "--volume", "imagenet:/data", "--volume", "scratch:/out:rw",
               stdin=json.dumps(spec))  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert Job.objects.get().volumes == [
        {"name": "weights", "path": "/weights", "read_only": True},
        {"name": "imagenet", "path": "/data", "read_only": True},
        {"name": "scratch", "path": "/out", "read_only": False},
    ]


def test_a_volume_option_without_a_path_is_a_usage_error(cli, alpha):  # noqa: F811
    done = cli("submit", "-", "--volume", "imagenet", stdin=json.dumps(SPEC))

    assert done.returncode == 2
    assert "not NAME:PATH or NAME:PATH:rw: 'imagenet'" in done.stderr
    assert not Job.objects.exists()


def test_a_volume_the_team_lacks_is_the_servers_400_naming_volumes(cli, alpha):  # noqa: F811
    done = cli("submit", "-", "--volume", "other:/data", stdin=json.dumps(SPEC))

    assert done.returncode == 1
    assert done.stderr.startswith("error 400") and "has no volume 'other'" in done.stderr
    assert "volumes" in done.stderr


def test_volumes_lists_the_teams_volumes_as_a_table(cli, alpha, gamma):  # noqa: F811
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    TenantVolumeFactory(tenant=alpha, name="imagenet", description="ImageNet 2012")
    TenantVolumeFactory(tenant=alpha, name="scratch", clusters=[west, east], writable=True)
    TenantVolumeFactory(tenant=gamma, name="their-weights")

    done = cli("volumes")

    assert done.returncode == 0, done.stderr
    assert cells(done.stdout) == [
        ["tenant", "volume", "access", "clusters", "description"],
        ["alpha", "imagenet", "read only", "all", "ImageNet 2012"],
        ["alpha", "scratch", "read-write", "east,west"],
    ]


def test_volumes_narrows_to_one_tenant_and_refuses_another_teams(cli, alice, alpha, gamma):  # noqa: F811
    delta = TenantFactory(slug="delta")
    MembershipFactory(tenant=delta, user=alice, role=Membership.Role.VIEWER)
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    TenantVolumeFactory(tenant=delta, name="weights")

    one = cli("volumes", "--tenant", "delta")
    theirs = cli("volumes", "--tenant", "gamma")

    assert [row[:2] for row in cells(one.stdout)] == [["tenant", "volume"], ["delta", "weights"]]
    assert theirs.returncode == 1
    assert "error 400" in theirs.stderr and "None of your tenants has this slug" in theirs.stderr


def test_volumes_says_so_when_there_are_none(cli, gamma):  # noqa: F811
    TenantVolumeFactory(tenant=gamma, name="their-weights")

    done = cli("volumes")

    assert (done.returncode, done.stdout) == (0, "No volumes.\n")


def test_status_shows_the_jobs_volumes(cli, alpha, alice):  # noqa: F811
    mounts = [{"name": "imagenet", "path": "/data", "read_only": True}]
    job = JobFactory(tenant=alpha, owner=alice, volumes=mounts)

    shown = json.loads(cli("status", str(job.pk)).stdout)

    assert shown["volumes"] == mounts
