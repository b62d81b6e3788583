"""Checkpoints reported by a line of output: a pod whose log has a line that is exactly
MLSCHED_CHECKPOINT_LINE reports the time Kubernetes stamped on it, with no shared volume."""

import os
import time
from datetime import timedelta

import pytest
from django.db.models import F

from clusters.agent.runner import Agent
from clusters.backends import base
from clusters.backends import k8s_specs as specs
from jobs import actions, cycle
from jobs.models import Attempt, LogChunk
from tests.clusters.test_checkpoints import InProcessControlPlane, stepped_until
from tests.factories import JobFactory, NodeFactory
from tests.k8s.conftest import (
    NAMESPACE,
    env_of,
    eventually,
    one_gpu_worker,
    resumed,
    status_becomes,
)

POD = "mlsched-7-0"
LINE = base.CHECKPOINT_LINE


def checkpoint_becomes(backend, at, timeout=5.0):
    """Wait until the worker of attempt 7 reports a checkpoint at `at`; return its status."""

    def check():
        status = backend.status()[0]
        return status if status.checkpoint_at == pytest.approx(at, abs=1e-6) else None

    try:
        return eventually(check, timeout)
    except AssertionError:
        raise AssertionError(f"no checkpoint at {at}: {backend.status()}") from None


def running(kube, backend):
    backend.start(one_gpu_worker())
    kube.run_pod(NAMESPACE, POD)
    status_becomes(backend, 7, 0, base.RUNNING)


def test_every_pod_is_told_the_checkpoint_line(kube, backend):
    backend.start(one_gpu_worker())

    assert env_of(kube.pod(NAMESPACE, POD))["MLSCHED_CHECKPOINT_LINE"] == LINE


def test_a_pod_that_prints_the_checkpoint_line_reports_the_time_stamped_on_it(kube, backend):
    running(kube, backend)
    saved = time.time() - 120  # the line's time, not the agent's

    kube.append_log(NAMESPACE, POD, "epoch 3", at=saved - 5)
    kube.append_log(NAMESPACE, POD, LINE, at=saved)

    assert checkpoint_becomes(backend, saved).phase == base.RUNNING
    assert [line.text for line in backend.logs()] == ["epoch 3", LINE]  # a line of its log too


def test_a_line_that_holds_the_checkpoint_line_among_other_text_does_not_count(kube, backend):
    running(kube, backend)
    saved = time.time() - 120
    kube.append_log(NAMESPACE, POD, LINE, at=saved)
    checkpoint_becomes(backend, saved)

    lookalikes = [
        f"INFO {LINE}",
        f"{LINE}.",
        f" {LINE}",
        f"{LINE} ",
        f"MLSCHED_CHECKPOINT_LINE={LINE}",
        f"+ echo '{LINE}'",
        LINE.upper(),
    ]
    kube.append_log(NAMESPACE, POD, *lookalikes, "epoch 4", at=saved + 60)
    eventually(lambda: [line.text for line in backend.logs()][-1:] == ["epoch 4"])

    assert backend.status()[0].checkpoint_at == pytest.approx(saved, abs=1e-6)


def test_the_latest_checkpoint_line_counts(kube, backend):
    running(kube, backend)
    first = time.time() - 300

    kube.append_log(NAMESPACE, POD, LINE, at=first)
    checkpoint_becomes(backend, first)
    kube.append_log(NAMESPACE, POD, LINE, at=first + 200)

    checkpoint_becomes(backend, first + 200)


def test_a_checkpoint_printed_in_the_stop_grace_period_is_reported_with_the_stop(kube, backend):
    kube.finish_deletions = False  # the kubelet waits out the grace period
    running(kube, backend)
    backend.stop(7, grace_s=30)
    saved = time.time() - 1

    kube.append_log(NAMESPACE, POD, LINE, at=saved)  # the job's SIGTERM handler saved one
    kube.exit_pod(NAMESPACE, POD, 0)

    status = status_becomes(backend, 7, 0, base.STOPPED)
    assert status.checkpoint_at == pytest.approx(saved, abs=1e-6)


def test_a_restarted_backend_reports_the_same_time_for_the_line(kube, backend, make_backend):
    running(kube, backend)
    saved = time.time() - 120
    kube.append_log(NAMESPACE, POD, LINE, at=saved)
    checkpoint_becomes(backend, saved)
    (shipped,) = backend.logs()
    backend.close()

    restarted = make_backend()  # reads the whole log again, later
    resumed(restarted, base.LogResume(seq=shipped.seq, at=shipped.at, taken=1))

    checkpoint_becomes(restarted, saved)  # a line the control plane has still counts
    assert restarted.logs() == []


def test_the_later_of_the_line_and_the_mounted_marker_counts(kube, make_backend, tmp_path):
    kube.add_claim(NAMESPACE, "checkpoints")
    backend = make_backend(checkpoint_claim="checkpoints", checkpoint_mount=str(tmp_path))
    running(kube, backend)
    marker = tmp_path / "alpha" / "42" / base.CHECKPOINT_MARKER
    marker.parent.mkdir(parents=True)
    marker.touch()
    touched = time.time() - 600
    os.utime(marker, (touched, touched))

    kube.append_log(NAMESPACE, POD, LINE, at=touched + 300)
    checkpoint_becomes(backend, touched + 300)  # the line is later
    os.utime(marker, (touched + 400, touched + 400))

    checkpoint_becomes(backend, touched + 400)  # now the marker is


@pytest.mark.django_db
def test_a_preempted_attempt_wastes_only_the_work_since_the_checkpoint_its_pod_printed(
    kube, backend, east
):
    NodeFactory(cluster=east, name="gpu-a", gpu_count=8)  # the test server's node
    job = JobFactory(gpus=1, preemptible=True)
    cycle.run_cycle()
    attempt = job.attempts.get()
    agent = Agent(InProcessControlPlane(east), backend)
    agent.step()  # the pod is created
    namespace = specs.namespace_name("mlsched-", job.tenant.slug)
    pod = specs.pod_name(attempt.pk, 0)
    kube.run_pod(namespace, pod)
    stepped_until(agent, lambda: Attempt.objects.get(pk=attempt.pk).started_at)
    hour = timedelta(hours=1)
    Attempt.objects.filter(pk=attempt.pk).update(
        scheduled_at=F("scheduled_at") - hour, started_at=F("started_at") - hour
    )
    saved = time.time() - 600  # ten minutes ago, 50 minutes into the run

    kube.append_log(namespace, pod, LINE, at=saved)
    stepped_until(agent, lambda: Attempt.objects.get(pk=attempt.pk).last_checkpoint_at)
    actions.request_stop([job.pk], Attempt.Outcome.PREEMPTED, "preempted")
    stepped_until(agent, lambda: Attempt.objects.get(pk=attempt.pk).ended_at)

    attempt.refresh_from_db()
    assert attempt.outcome == Attempt.Outcome.PREEMPTED
    assert attempt.last_checkpoint_at.timestamp() == pytest.approx(saved, abs=1e-3)
    lost = attempt.ended_at - attempt.last_checkpoint_at
    placing = attempt.started_at - attempt.scheduled_at
    assert attempt.wasted_gpu_seconds == pytest.approx((lost + placing).total_seconds())
    assert list(LogChunk.objects.filter(attempt=attempt).values_list("text", flat=True)) == [LINE]
