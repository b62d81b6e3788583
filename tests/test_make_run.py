"""`make run`, the README's first command, serves the portal and the admin login."""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_200(url: str, deadline: float) -> int | None:
    while time.monotonic() < deadline:
        try:
            status = requests.get(url, timeout=2).status_code
            if status == 200:
                return status
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    return None


def test_make_run_serves_the_portal_and_admin_login_within_90_seconds(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["MLSCHED_VAR_DIR"] = str(tmp_path)
    started = time.monotonic()
    server = subprocess.Popen(
        ["make", "run", f"PORT={port}"], cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = started + 90
        front = wait_for_200(f"http://127.0.0.1:{port}/", deadline)
        login = wait_for_200(f"http://127.0.0.1:{port}/admin/login/", deadline)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        output = server.communicate(timeout=30)[0]

    assert (front, login) == (200, 200), output
    assert "Admin user: admin / " in output
    assert f"http://127.0.0.1:{port}/" in output
