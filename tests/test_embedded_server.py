"""The embedded server (`make run`) as a user starts, restarts and stops it: a real process on
SQLite, no PostgreSQL and no Redis."""

import contextlib
import io
import os
import signal
import sqlite3
import sys
import threading
import time
import zipfile

import pytest
import requests

from tests.processes import ROOT, Child, free_port, gone, wait_until


def embedded_env(var_dir) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return dict(env, MLSCHED_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1")


def serve(var_dir, port: int) -> Child:
    return Child(
        [sys.executable, "manage.py", "run_embedded", "--port", str(port)],
        cwd=ROOT, env=embedded_env(var_dir), start_new_session=True,
    )  # fmt: skip


def answers(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


def clusters_health(var_dir) -> dict[str, str]:
    """Each demo cluster's health as the server's database has it."""
    with contextlib.closing(sqlite3.connect(var_dir / "mlsched.sqlite3", timeout=20)) as db:
        return dict(db.execute("SELECT name, health FROM clusters_cluster"))


def heartbeats(var_dir) -> dict[str, str]:
    """When each demo cluster's agent was last heard, as the server's database has it."""
    with contextlib.closing(sqlite3.connect(var_dir / "mlsched.sqlite3", timeout=20)) as db:
        return dict(db.execute("SELECT name, last_heartbeat FROM clusters_cluster"))


def stop(server: Child) -> str:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)
    return server.communicate(timeout=30)[0]


@pytest.fixture
def running(tmp_path):
    """An embedded server on a fresh var dir, answering; its var dir, port and process."""
    port = free_port()
    server = serve(tmp_path, port)
    try:
        assert wait_until(lambda: answers(port), timeout=90), server.communicate(timeout=1)
        yield tmp_path, port, server
    finally:
        stop(server)


def test_it_starts_its_agents_once_it_listens(running):
    var_dir, port, server = running
    assert wait_until(lambda: "healthy" in clusters_health(var_dir).values(), timeout=30)
    cli = requests.get(f"http://127.0.0.1:{port}/cli/mlsched.pyz", timeout=30).content

    output = stop(server)

    assert "Connection refused" not in output
    assert output.index("Admin user:") < output.index(f"serving on http://127.0.0.1:{port}/")
    assert f"Command line: curl -fo mlsched http://127.0.0.1:{port}/cli/mlsched.pyz" in output
    server_named = zipfile.ZipFile(io.BytesIO(cli)).read("jobs/cli/server.txt")
    assert server_named == f"http://127.0.0.1:{port}\n".encode()


def test_a_second_server_on_the_same_var_dir_refuses_to_start_and_leaves_the_first_running(
    running,
):
    var_dir, port, _ = running
    second = serve(var_dir, free_port())
    try:
        ended = wait_until(lambda: second.poll() is not None, timeout=60)
    finally:
        output = stop(second)
    then = heartbeats(var_dir)

    assert ended and second.returncode != 0
    assert "another mlsched server" in output.lower()
    # The first server's agents are still heard: their tokens were not replaced.
    assert wait_until(
        lambda: all(heartbeats(var_dir)[name] > then[name] for name in then), timeout=30
    )
    assert set(clusters_health(var_dir).values()) == {"healthy"}


def test_a_port_in_use_is_an_error_and_no_server_is_announced(running, tmp_path_factory):
    _, port, _ = running
    second = serve(tmp_path_factory.mktemp("other"), port)
    try:
        ended = wait_until(lambda: second.poll() is not None, timeout=90)
    finally:
        output = stop(second)

    assert ended and second.returncode != 0
    assert "serving on" not in output
    assert f"Cannot listen on port {port} (in use" in output


def test_it_stops_on_sigterm_while_requests_are_in_flight(running):
    _, port, server = running
    hammering = threading.Event()

    def hammer():
        with requests.Session() as session:
            while not hammering.is_set():
                with contextlib.suppress(requests.RequestException):
                    session.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=5)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)
        server.send_signal(signal.SIGTERM)
        stopped = wait_until(lambda: gone(server.pid), timeout=20)
    finally:
        hammering.set()
        for thread in threads:
            thread.join()

    assert stopped
