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
    percent), set by the test; and `pmon` (one sample of each process's utilization) from
    `busy.processes` ((GPU index, pid, percent) each), nothing until the test sets it, as a
    host without per-process figures answers."""
    readings, processes = tmp_path / "readings", tmp_path / "processes"
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = pmon ]; then cat {processes}; else cat {readings}; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")

    def busy(**percent):
        readings.write_text("".join(f"{i[1:]}, {p}\n" for i, p in percent.items()))

    def by_process(rows):
        header = "# gpu        pid  type    sm   mem   enc   dec   command\n" \
                 "# Idx          #   C/G     %     %     %     %   name\n"  # fmt: skip
        lines = [f"    {gpu}   {pid:>8}     C   {sm:>3}    10     -     -   python\n"
                 for gpu, pid, sm in rows]  # fmt: skip
        processes.write_text(
            header + "".join(lines) + "    1          -     -     -     -     -     -   -\n"
        )

    busy.processes = by_process
    return busy


@pytest.fixture
def host(tmp_path):
    """A local backend measuring its host's GPUs, as run_agent makes it without --inventory."""
    nodes = parse_inventory("1x8xA100", "local")
    return LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2,
                        cgroups=False, measure_gpus=True)  # fmt: skip


def shared(gpu_milli=250, attempt=1):
    whole = spec(SLEEPS, attempt=attempt, gpus=((0,),))
    share = dataclasses.replace(whole.workers[0], gpu_milli=gpu_milli)
    return dataclasses.replace(whole, workers=(share,))


def running(host) -> int:
    """The process id of attempt 1's worker, once it runs (its process group's too)."""
    wait_until(lambda: (host.worker_dir(1, 0) / "child.pid").exists(), timeout=10)
    return int((host.worker_dir(1, 0) / "child.pid").read_text())


def counted_over_a_second(host) -> tuple[float, float]:
    """The worker's GPU-seconds busy at a first sample (counting starts) and a second later."""
    first = phases(host)[0].gpu_busy_seconds
    time.sleep(1.0)
    return first, phases(host)[0].gpu_busy_seconds


def test_nvidia_smis_readings_are_each_gpus_utilization():
    command = ("sh", "-c", "printf '0, 57\\n1, 100\\n2, [N/A]\\n'")

    assert local_usage.gpu_utilization(command) == {0: 0.57, 1: 1.0}
    assert local_usage.gpu_utilization(("no-such-nvidia-smi",)) == {}


def test_a_worker_is_counted_busy_for_its_gpus_utilization_between_samples(host, gpus, monkeypatch):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    gpus(g0=50, g1=100, g2=100)  # GPU 2 is another worker's
    host.start(spec(SLEEPS, gpus=((0, 1),)))
    running(host)

    first, second = counted_over_a_second(host)

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


def test_a_share_without_per_process_figures_or_a_virtual_inventory_is_not_measured(
    host, gpus, tmp_path
):
    gpus(g0=100)
    virtual = LocalBackend(tmp_path / "virtual", host.nodes, tmp_path / "ckpt", cgroups=False)
    host.start(shared())
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


def test_nvidia_smi_pmons_readings_are_each_processs_utilization_by_gpu():
    answer = ("# gpu pid type sm mem enc dec command\n# Idx # C/G % % % % name\n"
              "    0  4242  C  37  12  -  -  python\n    0  4243  C   -   -  -  -  python\n"
              "    1     -  -   -   -  -  -  -\n")  # fmt: skip
    command = (sys.executable, "-c", f"print({answer!r}, end='')")

    assert local_usage.process_utilization(command) == {0: {4242: 0.37}}
    assert local_usage.process_utilization(("no-such-nvidia-smi",)) == {}


def test_a_share_is_counted_busy_for_what_its_own_processes_use_of_the_gpu(host, gpus, monkeypatch):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    gpus(g0=100)  # the whole GPU is busy: its sharers' together
    host.start(shared())
    pid = running(host)
    gpus.processes([(0, pid, 20), (0, pid + 100_000, 80)])  # another sharer's process

    first, second = counted_over_a_second(host)

    assert first == 0.0
    # 0.2 of the GPU busy for the second or so between the two samples, not the GPU's 1.0.
    assert 0.18 <= second <= 0.2 * 3
    host.stop(1, grace_s=1)


def test_a_share_reads_idle_below_the_idle_mark_of_its_own_share(host, gpus, monkeypatch):
    monkeypatch.setattr(usage, "SAMPLE_EVERY_S", 0.0)
    gpus(g0=100)
    host.start(shared(gpu_milli=500))
    pid = running(host)

    gpus.processes([(0, pid, 3)])  # 3 % of the GPU: 6 % of its half, busy
    busy = phases(host)[0].gpu_idle_since
    gpus.processes([(0, pid, 2), (0, pid + 100_000, 90)])  # 4 % of its half: idle
    idle = phases(host)[0].gpu_idle_since

    assert busy is None
    assert idle is not None
    host.stop(1, grace_s=1)
