"""Quarantine: a node where attempts of several jobs ended for a node's fault within the window
is cordoned by the control plane, says why, and comes back when an admin uncordons it; never
more than a quarter of a cluster's nodes."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.models import Node
from jobs import actions, cycle, quarantine
from jobs.models import Attempt
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


@pytest.fixture
def nodes(east):
    """Four one-GPU nodes of east: a quarter of them may be quarantined."""
    return [NodeFactory(cluster=east, name=f"n{i}", gpu_count=1) for i in range(4)]


@pytest.fixture
def fail_on(django_capture_on_commit_callbacks):
    """Place ``count`` new jobs, one after the other, on ``node`` and end each attempt as
    ``outcome``, through the verb an agent's report goes through (its commit hooks run)."""

    def fail(node, count, outcome=Outcome.INFRA_ERROR, reason="worker 0: Xid 79", job=None):
        others = Node.objects.exclude(pk=node.pk).filter(schedulable=True)
        kept = list(others.values_list("pk", flat=True))
        others.update(schedulable=False)
        for _ in range(count):
            failing = job or JobFactory(gpus=1, max_retries=5)
            Node.objects.filter(pk=node.pk).update(schedulable=True)
            failing.refresh_from_db()
            cycle.run_cycle(failing.not_before.timestamp() + 1 if failing.not_before else None)
            attempt = failing.attempts.get(outcome="")
            with django_capture_on_commit_callbacks(execute=True):
                actions.end_attempt(attempt.pk, outcome, reason=reason)
        Node.objects.filter(pk__in=kept).update(schedulable=True)
        node.refresh_from_db()
        return node

    return fail


def test_a_node_that_failed_three_jobs_is_cordoned_and_says_why(nodes, fail_on):
    bad = fail_on(nodes[0], 3)

    assert bad.schedulable is False
    assert bad.quarantined_at is not None
    assert bad.quarantine_reason == "3 jobs failed here for the infrastructure within 3600 s"
    assert all(n.schedulable for n in Node.objects.exclude(pk=bad.pk))


def test_two_jobs_failed_are_not_enough(nodes, fail_on):
    assert fail_on(nodes[0], 2).schedulable is True


def test_one_job_failing_again_and_again_is_the_jobs_fault_not_the_nodes(nodes, fail_on):
    job = JobFactory(gpus=1, max_retries=5)

    assert fail_on(nodes[0], 3, job=job).schedulable is True


@pytest.mark.parametrize(
    "outcome, reason",
    [(Outcome.LOST, Attempt.AGENT_SILENT), (Outcome.USER_ERROR, "worker 0 exited with code 1")],
    ids=["lost with its cluster's agent", "the job's own error"],
)
def test_ends_that_say_nothing_of_the_node_do_not_count(nodes, fail_on, outcome, reason):
    assert fail_on(nodes[0], 3, outcome, reason).schedulable is True


REGISTRY_DOWN = (
    'worker 0: ImagePullBackOff: Back-off pulling image "registry.local/train:1": '
    "RegistryUnavailable: pinging container registry registry.local: connect: connection refused"
)
DISK_FULL = (
    'worker 0: ImagePullBackOff: Back-off pulling image "registry.local/train:1": '
    "ErrImagePull: failed to extract layer: write /var/lib/containerd/x: no space left on device"
)


def test_a_registrys_outage_does_not_quarantine_the_nodes_it_hit(nodes, fail_on):
    assert fail_on(nodes[0], 3, reason=REGISTRY_DOWN).schedulable is True


def test_pulls_that_failed_for_the_nodes_full_disk_count(nodes, fail_on):
    assert fail_on(nodes[0], 3, reason=DISK_FULL).schedulable is False


def test_workers_lost_on_the_node_count(nodes, fail_on):
    assert fail_on(nodes[0], 3, Outcome.LOST, "worker 0: node gone").schedulable is False


def test_failures_older_than_the_window_do_not_count(nodes, fail_on):
    fail_on(nodes[0], 2)
    Attempt.objects.update(ended_at=timezone.now() - timedelta(hours=2))

    assert fail_on(nodes[0], 1).schedulable is True


def test_no_more_than_a_quarter_of_a_clusters_nodes_are_quarantined(nodes, fail_on, caplog):
    first = fail_on(nodes[0], 3)
    with caplog.at_level(logging.WARNING, logger="jobs.quarantine"):
        second = fail_on(nodes[1], 3)

    assert (first.schedulable, second.schedulable) == (False, True)
    assert "quarantined already: not cordoned" in caplog.text


def test_a_cluster_of_fewer_than_four_nodes_keeps_them(east, fail_on):
    small = [NodeFactory(cluster=east, name=f"s{i}", gpu_count=1) for i in range(3)]

    assert fail_on(small[0], 3).schedulable is True


def test_uncordoning_a_node_ends_its_quarantine(nodes, fail_on):
    bad = fail_on(nodes[0], 3)

    actions.set_schedulable([bad.pk], True)

    bad.refresh_from_db()
    assert (bad.schedulable, bad.quarantined_at, bad.quarantine_reason) == (True, None, "")


def test_faults_from_before_an_admin_put_the_node_back_are_forgiven(nodes, fail_on):
    actions.set_schedulable([fail_on(nodes[0], 3).pk], True)

    assert fail_on(nodes[0], 1).schedulable is True
    assert fail_on(nodes[0], 2).schedulable is False  # three new failures quarantine it again


def test_quarantine_is_off_at_zero(nodes, fail_on, settings):
    settings.MLSCHED_QUARANTINE_JOBS = 0

    assert fail_on(nodes[0], 3).schedulable is True


def test_a_node_an_admin_cordoned_is_left_as_it_is(nodes):
    actions.set_schedulable([nodes[0].pk], False)

    assert quarantine.check([nodes[0].pk]) == []
    nodes[0].refresh_from_db()
    assert nodes[0].quarantined_at is None


def test_the_admin_lists_quarantined_nodes_with_why(nodes, fail_on, admin_client):
    fail_on(nodes[0], 3)

    page = admin_client.get("/admin/clusters/node/?quarantined=yes")

    assert page.status_code == 200
    assert "3 jobs failed here for the infrastructure" in page.text
    assert [node.name for node in page.context["cl"].result_list] == ["n0"]
