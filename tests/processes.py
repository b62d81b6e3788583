"""Helpers for tests that run real mlsched processes against the test database."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def process_env(**extra) -> dict[str, str]:
    """The environment of a child process that uses this test run's database."""
    db = connection.settings_dict
    url = f"postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = dict(os.environ, DATABASE_URL=url, PYTHONUNBUFFERED="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def manage(*args, env=None, **popen) -> subprocess.Popen:
    """Start `manage.py <args>` as a child process."""
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env or process_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def wait_until(predicate, timeout: float, interval: float = 0.1):
    """Poll until `predicate()` is truthy; return its value, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def waiting_on_a_lock(table: str) -> bool:
    """Whether some session of the test database waits on a row lock, in a statement that
    names `table`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query ILIKE %s",
            [f"%{table}%"],
        )
        return cursor.fetchone()[0] > 0
