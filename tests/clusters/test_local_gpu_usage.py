"""GPU time of the local backend's workers, on a host whose GPUs nvidia-smi reports. No GPU
and no nvidia-smi can run here: a script of that name on PATH answers as nvidia-smi does,
each GPU's utilization from a file the test writes."""

import dataclasses
import os
import stat
import sys
import time

import pytest

from clusters.backends import base, local_usage, usage
from clusters.backends.local import LocalBackend, parse_inventory
from tests.clusters.test_local_backend import ended, phases, spec
from tests.processes import wait_until

SLEEPS = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def gpus(tmp_path, monkeypatch):
    """A fake nvidia-smi answering `--query-gpu=index,utilization.gpu` from `busy` (GPU index:
    percent), set by the test."""
    readings = tmp_path / "readings"
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\ncat {readings}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")

    def busy(**percent):
        readings.write_text("".join(f"{i[1:]}, {p}\n" for i, p in percent.items()))

    return busy


@pytest.fixture
def host(tmp_path):
    """A local backend measuring its host's GPUs, as run_agent makes it without --inventory."""
    nodes = parse_inventory("1x8xA100", "local")
    return LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2,
                        cgroups=False, measure_gpus=True)  # fmt: skip


def test_nvidia_smis_readings_are_each_gpus_utilization():
    command = ("sh", "-c", "printf '0, 57\\n1, 100\\n2, [N/A]\\n'")

    assert local_usage.gpu_utilization(command) == {0: 0.57, 1: 1.0}
    assert local_usage.gpu_utilization(("no-such-nvidia-smi",)) == {}


def test_a_worker_is_counted_busy_for_its_gpus_utilization_between_samples(host, gpus, monkeypatch):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    gpus(g0=50, g1=100, g2=100)  # GPU 2 is another worker's
    host.start(spec(SLEEPS, gpus=((0, 1),)))
    wait_until(lambda: (host.worker_dir(1, 0) / "child.pid").exists(), timeout=10)

    first = phases(host)[0].gpu_busy_seconds  # counting starts
    time.sleep(1.0)
    second = phases(host)[0].gpu_busy_seconds

    assert first == 0.0
    # 1.5 GPUs busy for the second or so between the two samples.
    assert 1.4 <= second <= 1.5 * 3
    host.stop(1, grace_s=1)
    assert ended(host)[0].gpu_busy_seconds >= second  # an ended worker keeps its last count


def test_a_restarted_agent_counts_on_from_what_was_counted(host, gpus, monkeypatch, tmp_path):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    gpus(g0=100)
    host.start(spec(SLEEPS, gpus=((0,),)))
    wait_until(lambda: (host.worker_dir(1, 0) / "child.pid").exists(), timeout=10)
    phases(host)
    time.sleep(0.5)
    counted = phases(host)[0].gpu_busy_seconds

    again = LocalBackend(tmp_path / "state", host.nodes, tmp_path / "ckpt", cgroups=False,
                         measure_gpus=True)  # fmt: skip

    assert again.status()[0].gpu_busy_seconds == pytest.approx(counted)
    # Its counts are the same run: the control plane takes them as they are.
    assert again.usage_epoch == host.usage_epoch
    host.stop(1, grace_s=1)


def test_agents_on_other_state_directories_count_in_other_runs(host, tmp_path):
    other = LocalBackend(tmp_path / "other", host.nodes, tmp_path / "ckpt", cgroups=False)

    assert other.usage_epoch != host.usage_epoch


def test_a_share_of_a_gpu_or_a_virtual_inventory_is_not_measured(host, gpus, tmp_path):
    gpus(g0=100)
    whole = spec(SLEEPS, gpus=((0,),))
    share = dataclasses.replace(whole.workers[0], gpu_milli=250)
    shared = dataclasses.replace(whole, workers=(share,))
    virtual = LocalBackend(tmp_path / "virtual", host.nodes, tmp_path / "ckpt", cgroups=False)
    host.start(shared)
    virtual.start(spec(SLEEPS, attempt=2, gpus=((0,),)))
    wait_until(lambda: (host.worker_dir(1, 0) / "child.pid").exists(), timeout=10)
    wait_until(lambda: (virtual.worker_dir(2, 0) / "child.pid").exists(), timeout=10)

    assert phases(host)[0].phase == base.RUNNING
    assert phases(host)[0].gpu_busy_seconds is None
    assert phases(virtual, 2)[0].gpu_busy_seconds is None
    host.stop(1, grace_s=1)
    virtual.stop(2, grace_s=1)


def test_gpus_reading_idle_say_since_when_until_one_is_busy(host, gpus, monkeypatch):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    gpus(g0=0, g1=3)
    host.start(spec(SLEEPS, gpus=((0, 1),)))
    wait_until(lambda: (host.worker_dir(1, 0) / "child.pid").exists(), timeout=10)
    before = time.time()

    idle = phases(host)[0].gpu_idle_since
    still = phases(host)[0].gpu_idle_since
    gpus(g0=0, g1=80)
    busy = phases(host)[0].gpu_idle_since

    assert before - 1 <= idle <= time.time()
    assert still == idle  # since the first sample that read them idle
    assert busy is None
    host.stop(1, grace_s=1)
