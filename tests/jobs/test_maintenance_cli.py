"""The command line's `maintenance`: the clusters' maintenance windows not yet ended, as a table,
on a live server, as a user runs it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import ClusterFactory, NodeFactory
from tests.jobs.test_cli import cli  # noqa: F401 - the fixture, for the command line's tests
from tests.jobs.test_maintenance_api import next_month, window

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cli_lists_the_windows_not_yet_ended_in_a_table(cli):  # noqa: F811
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    begun = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    window(east, begun - timedelta(hours=5), hours=1, reason="long over")
    now = window(east, begun, reason="firmware")
    nodes = [NodeFactory(cluster=west, name=name) for name in ("gpu-b", "gpu-a")]
    starts = next_month()
    later = window(west, starts, nodes=nodes, reason="new PSUs")

    done = cli("maintenance")

    assert done.returncode == 0, done.stderr
    header, *rows = [line.split("  ") for line in done.stdout.splitlines()]
    cells = [[cell.strip() for cell in row if cell.strip()] for row in [header, *rows]]
    assert cells == [
        ["id", "cluster", "nodes", "from", "to", "status", "reason"],
        [str(now.pk), "east", "all", begun.isoformat().replace("+00:00", "Z"),
         (begun + timedelta(hours=4)).isoformat().replace("+00:00", "Z"), "in progress",
         "firmware"],
        [str(later.pk), "west", "gpu-a,gpu-b", f"{starts:%Y-%m-%dT%H}:00:00Z",
         f"{starts + timedelta(hours=4):%Y-%m-%dT%H}:00:00Z", "upcoming", "new PSUs"],
    ]  # fmt: skip


def test_the_cli_says_so_when_no_maintenance_is_planned(cli):  # noqa: F811
    window(ClusterFactory(name="east"), timezone.now() - timedelta(hours=5), hours=1)

    done = cli("maintenance")

    assert (done.returncode, done.stdout) == (0, "No maintenance planned.\n")


def test_the_cli_writes_out_control_characters_in_a_reason(cli):  # noqa: F811
    window(ClusterFactory(name="east"), timezone.now() + timedelta(hours=1), reason="\x1b]0;x\x07")

    done = cli("maintenance")

    assert "\x1b" not in done.stdout and "\\x1b]0;x\\x07" in done.stdout
