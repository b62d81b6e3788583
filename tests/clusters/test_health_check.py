"""A node health check (`run_agent --health-check`, Slurm's HealthCheckProgram): a command the
agent runs for each node, in a thread of its own; a node whose check does not exit 0 is reported
not ready with the check's last line as why, takes no new work, and is ready again once a check
passes. The checks are real /bin/sh processes; the agent reports to a real control plane."""

import os
import threading
import time

import pytest
from rest_framework.test import APIClient

from clusters.agent.client import ControlPlane
from clusters.agent.health import NOT_YET, HealthCheck
from clusters.agent.runner import Agent
from clusters.backends import base
from clusters.backends.local import LocalBackend, parse_inventory
from clusters.models import Node
from jobs import cycle
from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory, UserFactory
from tests.processes import wait_until

NODE = base.NodeInventory(name="east-a100-0", cpu_milli=8000, memory_mb=65536,
                          gpu_type="A100", gpu_count=8)  # fmt: skip


def verdict(command: str, node: base.NodeInventory = NODE, timeout_s: float = 10.0) -> str:
    return HealthCheck(command, timeout_s=timeout_s).check(node)


def test_a_check_that_exits_0_passes():
    assert verdict("echo all fine; exit 0") == ""


def test_a_failing_check_says_its_exit_and_its_last_line_of_output():
    said = verdict("echo checking; echo 'ERROR: GPU 3: 12 uncorrectable ECC errors' >&2; "
                   "printf '\\n  \\n'; exit 1")  # fmt: skip

    assert said == "health check failed (exit 1): ERROR: GPU 3: 12 uncorrectable ECC errors"


def test_the_check_is_told_which_node_it_checks():
    command = 'echo "$MLSCHED_NODE $MLSCHED_NODE_GPUS $MLSCHED_NODE_GPU_TYPE"; exit 3'

    assert verdict(command) == "health check failed (exit 3): east-a100-0 8 A100"


def test_a_check_past_its_timeout_is_killed_with_what_it_started_and_fails(tmp_path):
    child = tmp_path / "child.pid"
    started = time.monotonic()

    said = verdict(f"sleep 60 & echo $! > {child}; wait", timeout_s=0.5)

    assert said == "health check timed out after 0.5 s"
    assert time.monotonic() - started < 10
    pid = int(child.read_text())
    assert wait_until(lambda: not alive(pid), timeout=5)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended
        return stat.read().split()[2] != "Z"


def test_a_check_killed_by_a_signal_or_that_cannot_run_fails_saying_so():
    assert verdict("kill -9 $$") == "health check failed (killed by signal 9)"
    assert verdict("/no/such/nhc").startswith("health check failed (exit 127): ")


def test_its_output_is_cut_and_shown_printable():
    said = verdict("printf 'bad\\033[31m '; seq -s ' ' 1 200; exit 1")

    assert len(said) == 200
    assert "\x1b" not in said and said.startswith("health check failed (exit 1): bad [31m 1 2 3")


def test_a_node_is_not_ready_until_checked_and_the_backends_own_reason_comes_first():
    health = HealthCheck("exit 1")
    down = base.NodeInventory(name="b", cpu_milli=1, memory_mb=1, ready=False, not_ready="cordoned")

    before = health.apply([NODE, down])
    health.run_pass()
    after = health.apply([NODE, down])

    assert [(n.ready, n.not_ready) for n in before] == [(False, NOT_YET), (False, "cordoned")]
    assert [(n.ready, n.not_ready) for n in after] == [
        (False, "health check failed (exit 1)"), (False, "cordoned")
    ]  # fmt: skip


def test_a_verdict_that_changes_asks_for_the_inventory_once(tmp_path):
    calls = []
    broken = tmp_path / "broken"
    health = HealthCheck(f"test ! -e {broken}", changed=lambda: calls.append(1))
    health.apply([NODE])

    health.run_pass()
    health.run_pass()
    broken.touch()
    health.run_pass()

    assert len(calls) == 2  # checked first, then failing; not again for the same verdict


@pytest.fixture
def running_agent(live_server, east, tmp_path):
    """An agent of `east` (two virtual 8-GPU nodes) whose health check fails for a node while
    a file of its name exists in `tmp_path`, checked every 0.3 s."""
    nodes = parse_inventory("2x8xA100", "east")
    backend = LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2)
    command = f'if test -e {tmp_path}/"$MLSCHED_NODE"; then echo "GPU fell off the bus"; exit 1; fi'
    health = HealthCheck(command, interval_s=0.3, timeout_s=5)
    agent = Agent(ControlPlane(live_server.url, "east", east.rotate_token()), backend, 0.1,
                  health=health)  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=agent.run_forever, args=(stop,))
    thread.start()
    yield [node.name for node in nodes]
    stop.set()
    thread.join(timeout=10)


def reported(name: str) -> tuple[bool, str] | None:
    node = Node.objects.filter(name=name).first()
    return None if node is None else (node.healthy, node.not_ready_reason)


@pytest.mark.django_db(transaction=True)
def test_a_node_failing_its_check_takes_no_new_work_and_is_ready_again_once_it_passes(
    running_agent, tmp_path
):
    first, second = running_agent
    (tmp_path / second).touch()
    failed = (False, "health check failed (exit 1): GPU fell off the bus")

    assert wait_until(lambda: reported(first) == (True, "") and reported(second) == failed, 20)
    jobs = [JobFactory(gpus=8) for _ in range(2)]
    placed = cycle.run_cycle().placed
    assert placed == [jobs[0].pk]
    assert Job.objects.get(pk=jobs[1].pk).state == State.QUEUED
    client = APIClient()
    client.force_authenticate(UserFactory())
    listed = {n["name"]: n for n in client.get("/api/v1/nodes/").json()["nodes"]}
    assert listed[second]["state"] == "down"
    assert listed[second]["reason"] == (
        "its agent does not report it ready: health check failed (exit 1): GPU fell off the bus"
    )

    (tmp_path / second).unlink()

    assert wait_until(lambda: reported(second) == (True, ""), 20)
    assert cycle.run_cycle().placed == [jobs[1].pk]


@pytest.mark.django_db(transaction=True)
def test_a_slow_check_holds_no_heartbeat_back_and_the_agent_stopping_kills_it(
    live_server, east, tmp_path
):
    nodes = parse_inventory("1x8xA100", "east")
    backend = LocalBackend(tmp_path / "state", nodes, tmp_path / "ckpt", default_grace_s=2)
    child = tmp_path / "child.pid"
    health = HealthCheck(f"sleep 60 & echo $! > {child}; wait", interval_s=60, timeout_s=60)
    agent = Agent(ControlPlane(live_server.url, "east", east.rotate_token()), backend, 0.1,
                  health=health)  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=agent.run_forever, args=(stop,))
    thread.start()
    try:
        beats = []
        for _ in range(3):
            assert wait_until(lambda: heartbeat(east) not in beats, 10)
            beats.append(heartbeat(east))
        assert reported(nodes[0].name) == (False, NOT_YET)  # its check still runs
        assert wait_until(child.exists, 10)
    finally:
        asked = time.monotonic()
        stop.set()
        thread.join(timeout=30)

    assert not thread.is_alive() and time.monotonic() - asked < 5
    assert wait_until(lambda: not alive(int(child.read_text())), 5)


def heartbeat(cluster):
    cluster.refresh_from_db()
    return cluster.last_heartbeat
