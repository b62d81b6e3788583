"""Benchmark: reading one worker's lines of a long log (`?worker=`), as the job page and the CLI
read a log, when that worker wrote most of it and when it wrote almost nothing; and the lines
holding a text (`?grep=`), one most lines hold, one a single line holds, one none holds.

    python bench/log_worker.py [--lines 1000000] [--workers 8] [--repeat 7]

In a fresh database (`mlsched_bench_log_worker` on BENCH_SERVER_URL's server, default local
PostgreSQL): one job of `--workers` workers and one attempt whose log holds `--lines` lines,
rank 0 writing all of them but one for each other rank, at the log's start (frameworks often
log on rank 0 alone), then ANALYZE. Times, for a member of the job's tenant, the logs
endpoint's first page and its tail (`last=5000`, the job page's first read), for every worker,
for rank 0 and the last rank (the quiet one) and for the three texts, and a poll on from the
`next` the text none holds answered (as the job page polls it, nothing stored since), through
Django's test client (the whole request, one warm-up first); prints the median of `--repeat`
requests in milliseconds, one line each.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

DATABASE = "mlsched_bench_log_worker"
fresh_db.use(DATABASE)
BATCH = 50_000


def build(lines: int, workers: int):
    from django.contrib.auth.models import User
    from django.db import connection

    from jobs.models import Attempt, Job, LogChunk
    from quotas.models import Membership, PriorityClass, Tenant

    normal = PriorityClass.objects.create(name="normal", value=0)
    tenant = Tenant.objects.create(name="t", slug="t")
    user = User.objects.create(username="member")
    Membership.objects.create(tenant=tenant, user=user)
    job = Job.objects.create(tenant=tenant, owner=user, name="train", family="training",
                             image="i", command=["x"], cpu_milli=1, memory_mb=1, gpus=8,
                             workers=workers, priority_class=normal, max_runtime_s=60,
                             state="running")  # fmt: skip
    attempt = Attempt.objects.create(job=job, number=1)
    LogChunk.objects.bulk_create(
        LogChunk(attempt=attempt, worker=rank, seq=0, text=f"rank {rank} up")
        for rank in range(1, workers)
    )
    for start in range(0, lines - workers + 1, BATCH):
        LogChunk.objects.bulk_create(
            LogChunk(attempt=attempt, worker=0, seq=seq, text=f"step {seq} loss 0.{seq}")
            for seq in range(start, min(start + BATCH, lines - workers + 1))
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return user, job


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    fresh_db.create(DATABASE)
    user, job = build(args.lines, args.workers)
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["*"]
    quiet = args.workers - 1
    logs = f"/api/v1/jobs/{job.pk}/logs/"
    for name, url in (("first page, every worker", logs),
                      ("tail, every worker", f"{logs}?last=5000"),
                      ("first page, rank 0", f"{logs}?worker=0"),
                      ("tail, rank 0", f"{logs}?worker=0&last=5000"),
                      (f"first page, rank {quiet}", f"{logs}?worker={quiet}"),
                      (f"tail, rank {quiet}", f"{logs}?worker={quiet}&last=5000"),
                      # `?grep=`: a text most lines hold, one line holds, none holds.
                      ("first page, grep=LOSS", f"{logs}?grep=LOSS"),
                      ("tail, grep=LOSS", f"{logs}?grep=LOSS&last=5000"),
                      (f"first page, grep=rank {quiet} up", f"{logs}?grep=rank+{quiet}+up"),
                      (f"tail, grep=rank {quiet} up", f"{logs}?grep=rank+{quiet}+up&last=5000"),
                      ("first page, grep=Traceback", f"{logs}?grep=Traceback"),
                      ("tail, grep=Traceback", f"{logs}?grep=Traceback&last=5000"),
                      ):  # fmt: skip
        print(f"{name}: {fresh_db.median_get_ms(user, url, args.repeat):.1f} ms")
    # A poll on from what a read answered: nothing new stored, the text held by none.
    from django.test import Client

    client = Client()
    client.force_login(user)
    after = client.get(f"{logs}?grep=Traceback").json()["next"]
    polled = f"{logs}?grep=Traceback&after={after}"
    polled_ms = fresh_db.median_get_ms(user, polled, args.repeat)
    print(f"poll on from next, grep=Traceback: {polled_ms:.1f} ms")


if __name__ == "__main__":
    main()
