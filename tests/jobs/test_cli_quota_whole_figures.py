"""The CLI's quota table writes large whole figures (a memory quota in MiB, CPU in millicores)
as the API and the portal's quota page give them, never in scientific notation."""

import pytest

from tests.factories import QuotaFactory
from tests.jobs import test_cli

pytestmark = pytest.mark.django_db(transaction=True)

cli = test_cli.cli  # the command line against a live server, as Alice


def memory_row(table: str) -> list[str]:
    (row,) = [line.split() for line in table.splitlines() if " memory " in f" {line} "]
    return row


def test_the_cli_quota_shows_a_large_memory_guarantee_as_whole_mebibytes(cli, alpha):
    # The demo tenant's memory quota: 1310720 MiB, the demo clusters' whole capacity.
    QuotaFactory(tenant=alpha, flavor="memory", guaranteed=1310720, borrow_limit=0)

    done = cli("quota")

    assert done.returncode == 0, done.stderr
    assert "e+" not in done.stdout
    assert memory_row(done.stdout)[3:5] == ["1310720", "0"]
