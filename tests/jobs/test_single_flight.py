"""Single flight in the embedded mode (SQLite: a lock in the process, one per name): the daily
prune and the scheduler's cycle hold different locks, as their advisory locks differ."""

import pytest
from django.db import connection

from jobs import scheduler


@pytest.fixture
def embedded(monkeypatch, settings):
    settings.MLSCHED_SINGLE_FLIGHT = True
    monkeypatch.setattr(connection, "vendor", "sqlite")


def test_in_the_embedded_mode_a_prune_runs_while_a_cycle_holds_its_lock(embedded):
    with scheduler.single_flight() as cycle, scheduler.single_flight("prune") as prune:
        assert (cycle, prune) == (True, True)


def test_in_the_embedded_mode_a_cycle_runs_while_a_prune_holds_its_lock(embedded):
    with scheduler.single_flight("prune") as prune, scheduler.single_flight() as cycle:
        assert (prune, cycle) == (True, True)


def test_in_the_embedded_mode_a_second_holder_of_one_name_is_refused(embedded):
    with scheduler.single_flight("prune") as first, scheduler.single_flight("prune") as second:
        assert (first, second) == (True, False)
    with scheduler.single_flight("prune") as again:
        assert again
