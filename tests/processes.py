"""Helpers for tests that run real mlsched processes against the test database."""

import contextlib
import os
import pty
import signal
import socket
import subprocess
import sys
import tempfile
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


def on_a_terminal(command: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run a command with its standard output a pseudo-terminal, as a person's is: its exit
    status, what it wrote there (newlines as written) and its standard error."""
    ours, theirs = pty.openpty()
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=theirs, stderr=subprocess.PIPE,
                          timeout=60)  # fmt: skip
    os.close(theirs)
    written = b""
    while True:
        try:
            chunk = os.read(ours, 65536)
        except OSError:  # EIO: the terminal's other end closed and everything read
            break
        if not chunk:
            break
        written += chunk
    os.close(ours)
    return done.returncode, written.decode().replace("\r\n", "\n"), done.stderr.decode()


class Child(subprocess.Popen):
    """A child process whose output goes to a file, read back by ``communicate()``: a pipe
    nobody reads until the end would stop a chatty child (a traceback a tick through an
    outage) once 64 KiB wait in it."""

    def __init__(self, args, **popen):
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed with the child)
        super().__init__(args, stdout=self.log, stderr=subprocess.STDOUT, text=True, **popen)

    def communicate(self, input=None, timeout=None):
        self.wait(timeout)
        self.log.seek(0)
        return self.log.read(), None


def manage(*args, env=None, **popen) -> Child:
    """Start `manage.py <args>` as a child process."""
    return Child([sys.executable, "manage.py", *args], cwd=ROOT, env=env or process_env(), **popen)


def sqlite_shell(script: str, var_dir: Path) -> subprocess.CompletedProcess:
    """`script` run by `manage.py shell` in the embedded mode (no DATABASE_URL nor REDIS_URL:
    SQLite in `var_dir`), as `make run` serves it; its output captured."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", script],
        cwd=ROOT, env=dict(env, MLSCHED_VAR_DIR=str(var_dir)), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


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


def waiting_on_a_lock(table: str, sessions: int = 1) -> bool:
    """Whether some session of the test database (at least `sessions` of them) waits on a row
    lock, in a statement that names `table`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND query ILIKE %s",
            [f"%{table}%"],
        )
        return cursor.fetchone()[0] >= sessions


def stop_platform(processes, var: Path) -> None:
    """Kill the platform's processes still running and any worker their agents left behind
    (local backend, state under `var`): a test leaves nothing running."""
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
    for pid_file in var.glob("agents/*/workers/*/*/pid"):
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
