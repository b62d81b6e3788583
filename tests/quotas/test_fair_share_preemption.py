"""MLSCHED_FAIR_SHARE_PREEMPTION through the real cycle: with no quotas at all, a team that
filled the platform gives back, to a team that holds nothing, as much as leaves both even, and
no more; off, the second team waits for the first team's work to end."""

import pytest
from rest_framework.test import APIClient

from jobs import cycle
from jobs.models import Attempt, Job
from jobs.states import State
from quotas.models import PriorityClass
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.jobs import test_cli

pytestmark = pytest.mark.django_db

cli = test_cli.cli  # the command line against a live server, as Alice


@pytest.fixture
def filled(alpha, gamma, east):
    """Two 8-GPU nodes, all their GPUs held by four 4-GPU preemptible jobs of alpha."""
    for n in range(2):
        NodeFactory(cluster=east, name=f"east-{n}", gpu_type="A100", gpu_count=8)
    for _ in range(4):
        JobFactory(tenant=alpha, gpus=4, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()
    assert Job.objects.filter(tenant=alpha, state=State.SCHEDULED).count() == 4
    return alpha, gamma


def asked_to_stop(tenant) -> int:
    return Attempt.objects.filter(job__tenant=tenant, stop_requested_at__isnull=False).count()


def test_off_the_waiting_team_evicts_nobody(settings, filled):
    alpha, gamma = filled
    settings.MLSCHED_FAIR_SHARE_PREEMPTION = False
    JobFactory(tenant=gamma, gpus=8, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()

    assert asked_to_stop(alpha) == 0


def test_on_the_team_over_its_share_gives_back_as_far_as_both_are_even(settings, filled):
    alpha, gamma = filled
    settings.MLSCHED_FAIR_SHARE_PREEMPTION = True
    for _ in range(3):
        JobFactory(tenant=gamma, gpus=4, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()

    # gamma's first job takes 4 of alpha's 16 (12 against 4), its second 4 more (8 against 8);
    # a third would leave alpha under gamma: it waits.
    assert asked_to_stop(alpha) == 2
    assert asked_to_stop(gamma) == 0
    told = Attempt.objects.filter(job__tenant=alpha, stop_requested_at__isnull=False)
    assert {a.reason for a in told} == {
        "preempted: its team held more GPUs than its fair share while another team waited"
    }
    waiting = Job.objects.filter(tenant=gamma, state=State.QUEUED)
    assert waiting.count() == 3  # until alpha's victims have gone


@pytest.mark.parametrize(("platform", "in_class", "evicts"),
                         [(False, "on", True), (True, "off", False), (True, "", True)])  # fmt: skip
def test_a_priority_class_turns_it_on_or_off_for_its_jobs(
    settings, filled, platform, in_class, evicts
):
    alpha, gamma = filled
    settings.MLSCHED_FAIR_SHARE_PREEMPTION = platform
    PriorityClass.objects.filter(name="normal").update(fair_share_preemption=in_class)
    JobFactory(tenant=gamma, gpus=8, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()

    assert (asked_to_stop(alpha) > 0) is evicts


@pytest.mark.parametrize("on", [True, False])
def test_the_quota_api_page_and_cli_say_whether_it_is_on(settings, alice, client, cli, on):
    settings.MLSCHED_FAIR_SHARE_PREEMPTION = on
    api = APIClient()
    api.force_authenticate(alice)
    client.force_login(alice)

    answer = api.get("/api/v1/quotas/").json()
    page = client.get("/quotas/").text
    shown = cli("quota").stdout

    assert answer["fair_share_preemption"] is on
    assert answer["fair_share_preemption_classes"] == (["normal"] if on else [])
    assert ("Fair-share preemption is on for jobs of <code>normal</code>" in page) is on
    assert ("fair-share preemption is on for jobs of normal" in shown) is on


def test_the_quota_page_names_the_classes_that_turn_it_on(alice, client):
    PriorityClassFactory(name="urgent", value=100, fair_share_preemption="on")
    client.force_login(alice)

    page = client.get("/quotas/").text

    assert "Fair-share preemption is on for jobs of <code>urgent</code>:" in page
