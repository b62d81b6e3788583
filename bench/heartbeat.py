"""Benchmark: one cluster agent's heartbeat with many running attempts.

    python bench/heartbeat.py [--attempts 500] [--repeat 9]

In a fresh database (`mlsched_bench_heartbeat` on DATABASE_URL's server, default local
PostgreSQL): one cluster of 8-GPU nodes running `--attempts` one-GPU jobs, each with a command
and an environment of a realistic size. The agent reports every worker running, and posts the
heartbeat through the agent API (Django's test client: the whole request). Two reports are
timed, `--repeat` times each after one warm-up: a steady beat (nothing changed, every worker
reporting the same checkpoint and usage), a beat in which every worker reports a newer
checkpoint, and one in which every worker reports more CPU time and a higher memory peak (a
backend samples a worker every 30 s: all of them at once is the worst case). Prints, for
each, the median milliseconds, the number of SQL queries and the size of the answer in bytes.
A heartbeat runs every second per cluster: it should cost what changed, not what runs.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

DATABASE = "mlsched_bench_heartbeat"
fresh_db.use(DATABASE)


def build(count: int):
    """A cluster running `count` one-GPU jobs; returns the cluster and its agent token."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from clusters.models import Allocation, Cluster, Node
    from jobs.models import Attempt, Job
    from quotas.models import PriorityClass, Tenant

    now = timezone.now()
    cluster = Cluster.objects.create(name="bench", health="healthy", last_heartbeat=now)
    token = cluster.rotate_token()
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, name=f"node-{i}", cpu_milli=64_000, memory_mb=512_000,
             gpu_type="A100", gpu_count=8, last_seen=now)
        for i in range((count + 7) // 8)
    )  # fmt: skip
    tenant = Tenant.objects.create(name="t", slug="t")
    owner = User.objects.create(username="owner")
    normal = PriorityClass.objects.create(name="normal", value=0)
    env = {f"SETTING_{i}": "x" * 40 for i in range(20)}
    command = ["python", "-m", "train", "--config", "configs/" + "y" * 60 + ".yaml"]
    jobs = Job.objects.bulk_create(
        Job(tenant=tenant, owner=owner, name=f"job-{i}", family="training", image="img:1",
            command=command, env=env, cpu_milli=4000, memory_mb=32_000, gpus=1,
            priority_class=normal, max_runtime_s=86_400, state="running")
        for i in range(count)
    )  # fmt: skip
    attempts = Attempt.objects.bulk_create(
        Attempt(job=job, number=1, cluster=cluster, scheduled_at=now, started_at=now,
                worker_ran_at=now)
        for job in jobs
    )  # fmt: skip
    Allocation.objects.bulk_create(
        Allocation(attempt=a, node=nodes[i // 8], gpu_index=i % 8, gpu_milli=1000,
                   cpu_milli=4000, memory_mb=32_000)
        for i, a in enumerate(attempts)
    )  # fmt: skip
    return cluster, token, [a.pk for a in attempts]


def report(attempt_ids: list[int], checkpoint_at: float | None, used: int = 1) -> str:
    workers = [{"attempt_id": pk, "rank": 0, "phase": "running", "checkpoint_at": checkpoint_at,
                "cpu_seconds": 30.0 * used, "memory_peak_mb": 1000 + used}
               for pk in attempt_ids]  # fmt: skip
    return json.dumps({"workers": workers})


def measure(client, url: str, token: str, bodies, repeat: int) -> tuple[float, int, int]:
    """Median ms, queries and answer bytes of posting each body in turn (one warm-up first)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def post(body):
        return client.post(url, body, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Agent {token}")  # fmt: skip

    assert post(next(bodies)).status_code == 200
    times, queries, size = [], 0, 0
    for _ in range(repeat):
        body = next(bodies)
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = post(body)
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:200]
        queries, size = len(captured), len(response.content)
    return statistics.median(times), queries, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attempts", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    fresh_db.create(DATABASE)
    cluster, token, attempt_ids = build(args.attempts)
    from django.conf import settings
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    url = f"/api/v1/agent/{cluster.name}/heartbeat/"
    client = Client()
    steady = iter(lambda: report(attempt_ids, 1_000_000.0), None)
    # Checkpoints from now on (one from before an attempt's start is not its own: not kept).
    moving = (report(attempt_ids, time.time()) for _ in range(10**9))
    using = (report(attempt_ids, 1_000_000.0, used=n) for n in range(2, 10**9))
    beats = (("steady beat", steady), ("every checkpoint newer", moving),
             ("every usage sample newer", using))  # fmt: skip
    for name, bodies in beats:
        ms, queries, size = measure(client, url, token, bodies, args.repeat)
        print(f"{args.attempts} running, {name}: {ms:.1f} ms, {queries} queries, {size} bytes")


if __name__ == "__main__":
    main()
