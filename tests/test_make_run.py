"""`make run`, the README's first command: the portal, the admin login, the scheduler, and the
demo's example jobs run to their end."""

import os
import signal
import subprocess
import sys
import time

import requests

from tests.processes import ROOT, free_port


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


SUBMIT_AND_WAIT = """
import time
from django.contrib.auth.models import User
from jobs.models import Job, LogChunk
from quotas.models import PriorityClass, Tenant

job = Job.objects.create(
    tenant=Tenant.objects.get(slug="demo"), owner=User.objects.get(username="demo"),
    name="embedded", family="evaluation", image="python:3.11",
    command=["python3", "-c", "print('hello from the embedded agent')"],
    cpu_milli=1000, memory_mb=1000, gpus=1, gpu_types=["A100"],
    priority_class=PriorityClass.objects.get(name="normal"), max_runtime_s=60,
    labels={"project": "llm"},
)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    job.refresh_from_db()
    if job.state in ("succeeded", "failed"):
        break
    time.sleep(0.2)
print("STATE", job.state, job.attempts.count())
print("LOG", [c.text for c in LogChunk.objects.filter(attempt__job=job)])
# SQLite has no JSON containment: the label filter takes its other way there.
labelled = [Job.objects.labelled(asked).values_list("name", flat=True)
            for asked in ([("project", "llm")], [("project", "vision")], [("project", None)])]
print("LABELLED", [[n for n in names if not n.startswith("example-")] for names in labelled])
# The demo user's example jobs, seeded with the demo, run to their end.
examples = Job.objects.filter(name__startswith="example-")
deadline = time.monotonic() + 60
while examples.exclude(state="succeeded").exists() and time.monotonic() < deadline:
    time.sleep(0.5)
print("EXAMPLES", sorted(set(examples.values_list("name", "state"))), examples.count())
chunks = LogChunk.objects.filter(attempt__job__name__startswith="example-")
print("EXAMPLE LOG", " | ".join(c.text for c in chunks))
"""


def test_make_run_serves_portal_and_admin_in_90_seconds_and_runs_jobs(tmp_path):
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
        # The embedded scheduler and local agents run what is queued: no Redis, no Celery.
        placed = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", SUBMIT_AND_WAIT], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=150,
        )  # fmt: skip
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        output = server.communicate(timeout=30)[0]

    assert (front, login) == (200, 200), output
    assert "Admin user: admin / " in output
    assert f"http://127.0.0.1:{port}/" in output
    assert "STATE succeeded 1" in placed.stdout, (placed.stdout, placed.stderr, output)
    assert "hello from the embedded agent" in placed.stdout
    assert "LABELLED [['embedded'], [], ['embedded']]" in placed.stdout
    succeeded = [(f"example-{name}", "succeeded") for name in ("eval", "inference", "train")]
    assert f"EXAMPLES {succeeded} 6" in placed.stdout, placed.stdout
    for said in ("rank 1 of 2: step 10/10", "shard 3 of 4: 250 of 250 rows", "accuracy 0.913"):
        assert said in placed.stdout
