"""Benchmark: what keeping the queue's line costs a placement cycle, and what reading it costs a
request.

    python bench/standing.py [--scales 1,2] [--seed 7] [--repeat 5] [--reads 50]

For each scale, the placement benchmark's snapshot (bench/placement.py: 5,000 nodes and 20,000
queued jobs from 40 tenants at scale 1), its jobs given numeric ids and five owners per tenant
as the database's snapshot has them, decided once by `place()` (timed: the cycle's decide
step, for scale). Then, medians of `--repeat` runs: `standing.record` of that decision (what
a cycle adds when the line is due, every MLSCHED_LINE_EVERY_S, 5 s: the line of the jobs left
waiting, the first 10,000 with their points, written to the shared cache); and of `--reads`
reads each: `standing.of` for the job recorded last in line (the longest search) and
`standing.line_of` for one tenant's first 100 (the queue API's page), both reading the line
as a web process does (a stamp, and the line once per line recorded); and, for comparison,
what each read would cost fetching and parsing the whole record (`whole_read`). The shared cache is
Redis when REDIS_URL is set (as deployed; MLSCHED_THROTTLE_REDIS_DB names its database), else
this process's memory.
"""

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlsched_site.settings")
os.environ.setdefault("SECRET_KEY", "mlsched-bench")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.cache import caches  # noqa: E402
from placement import build_snapshot  # noqa: E402

from jobs import standing  # noqa: E402
from jobs.placement import PLACED, place  # noqa: E402


def numbered(snapshot, seed: int):
    """The snapshot with numeric job and tenant ids, and five owners per tenant."""
    rng = random.Random(seed)
    tenants = {t.id: str(i + 1) for i, t in enumerate(snapshot.tenants)}
    queued = tuple(
        dataclasses.replace(job, id=str(i + 1), tenant=tenants[job.tenant],
                            owner=f"user-{rng.randrange(5)}")
        for i, job in enumerate(snapshot.queued)
    )  # fmt: skip
    users = {f"user-{n}": float(rng.choice((0, 1, 8, 64))) for n in range(5)}
    kept = tuple(dataclasses.replace(t, id=tenants[t.id], user_use=users) for t in snapshot.tenants)
    return dataclasses.replace(snapshot, queued=queued, tenants=kept)


def timed(work, repeat: int) -> float:
    """The median seconds of `repeat` runs of `work()`."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(scale: int, seed: int, repeat: int, reads: int) -> dict:
    snapshot = numbered(build_snapshot(scale, seed), seed)
    start = time.perf_counter()
    decision = place(snapshot)
    decide_s = time.perf_counter() - start
    placed = {int(o.job_id) for o in decision.outcomes if o.status == PLACED}
    record_s = timed(lambda: standing.record(decision, snapshot, placed), repeat)
    line = standing.line_of(frozenset({1}), limit=1)
    assert line is not None, "the line was not kept"
    last = [o for o in decision.outcomes if int(o.job_id) not in placed][: standing.RECORDED][-1]
    queued = {job.id: job for job in snapshot.queued}[last.job_id]
    job = SimpleNamespace(
        pk=int(last.job_id), tenant_id=int(queued.tenant), state="queued", held="",
        pending_reason="insufficient_gpus",
        created=datetime.fromtimestamp(queued.submit_time, tz=UTC),
    )  # fmt: skip
    found = standing.of(job)
    assert found is not None and found.position is not None
    of_s = timed(lambda: standing.of(job), reads)
    page_s = timed(lambda: standing.line_of(frozenset({1}), limit=100), reads)
    # What every read would cost without the process's copy: the record fetched and parsed.
    whole_s = timed(lambda: standing.Line(caches["shared"].get(standing.KEY)), reads)
    return {
        "queued": len(snapshot.queued),
        "waiting": line.waiting,
        "position": found.position,
        "decide_s": decide_s,
        "record_ms": record_s * 1000,
        "of_ms": of_s * 1000,
        "page_ms": page_s * 1000,
        "whole_ms": whole_s * 1000,
    }


def main() -> None:
    settings.MLSCHED_LINE_EVERY_S = 0  # every record is timed (a cycle records every 5 s)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,2")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reads", type=int, default=50)
    args = parser.parse_args()
    cache = "Redis" if os.environ.get("REDIS_URL") else "this process's memory"
    print(f"shared cache: {cache}; line records the first {standing.RECORDED:,} jobs")
    print("queued  waiting  decide_s  record_ms  record/decide  of(last)_ms  line_of(100)_ms"
          "  whole_read_ms")  # fmt: skip
    for scale in (int(s) for s in args.scales.split(",")):
        r = run(scale, args.seed, args.repeat, args.reads)
        print(f"{r['queued']:>6}  {r['waiting']:>7}  {r['decide_s']:>8.2f}  "
              f"{r['record_ms']:>9.1f}  {r['record_ms'] / 1000 / r['decide_s']:>12.1%}  "
              f"{r['of_ms']:>11.2f}  {r['page_ms']:>15.2f}  {r['whole_ms']:>13.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
