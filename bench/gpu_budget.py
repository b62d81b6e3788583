"""Benchmark: what GPU-hour budgets cost a cycle's load (the snapshot).

    python bench/gpu_budget.py [--history 100000] [--rounds 15]

Builds the cycle benchmark's cluster and queue (bench/cycle.py: 1,000 nodes, 10,000 queued
jobs, 8 tenants), runs its drain cycles, then adds `--history` ended attempts spread over this
month (a month of a busy platform's attempts, each of its own job) and loads as if it were
the month's 30th day at noon (`at()`), the month nearly spent; the tables analyzed, as
autovacuum would have after the inserts. Then it loads the
snapshot `--rounds` times with no tenant budgeted and as many with every tenant budgeted
(budgets large enough to change no decision), alternating the two, and prints the median load
time of each and their ratio: first before the daily roll-up has run (the month's use read
from its attempts), then after it (its whole days read from the roll-up, as once retention
runs daily); its last line is `budget load ratio with the roll-up: R`.
"""

import argparse
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fresh_db  # noqa: E402

DATABASE = os.environ.get("BENCH_DATABASE", "mlsched_bench_budget")
fresh_db.use(DATABASE)


def at() -> datetime:
    """The moment the snapshots are loaded at: the month's 30th day (its last, in February)."""
    from jobs import budgets

    start = budgets.month_start(datetime.now(UTC))
    return min(start + timedelta(days=29, hours=12), budgets.renews(start) - timedelta(hours=12))


def add_history(count: int, rng: random.Random) -> None:
    """``count`` ended jobs with one attempt each, spread over this month up to at()."""
    from django.contrib.auth.models import User

    from jobs import budgets
    from jobs.models import Attempt, Job
    from jobs.states import State
    from quotas.models import PriorityClass, Tenant

    now = datetime.now(UTC)
    normal = PriorityClass.objects.get(name="normal")
    start = budgets.month_start(now)
    span = max((now - start).total_seconds() - 7200, 3600)
    tenants, owner = list(Tenant.objects.all()), User.objects.get(username="bench")
    for first in range(0, count, 5000):
        size = min(count, first + 5000) - first
        times = [start + timedelta(seconds=rng.uniform(0, span)) for _ in range(size)]
        jobs = Job.objects.bulk_create(
            Job(tenant=rng.choice(tenants), owner=owner, name=f"h{first + i}", image="x",
                command=["true"], family="batch_inference", gpus=rng.choice([1, 2, 8]),
                cpu_milli=1000, memory_mb=1000, max_runtime_s=7200, state=State.SUCCEEDED,
                priority_class=normal,
                created=at, started_at=at, finished_at=at + timedelta(hours=1))
            for i, at in enumerate(times)
        )  # fmt: skip
        Attempt.objects.bulk_create(
            Attempt(job=job, number=1, cluster_id=1, outcome=Attempt.Outcome.SUCCEEDED,
                    scheduled_at=at, started_at=at, ended_at=at + timedelta(hours=1),
                    gpu_type="A100")
            for job, at in zip(jobs, times, strict=True)
        )  # fmt: skip


def budget_all(hours: int | None) -> None:
    from quotas.models import Tenant

    Tenant.objects.update(gpu_hours_per_month=hours)


def timed_load() -> float:
    from jobs import snapshot

    start = time.perf_counter()
    snapshot.load(at().timestamp(), 0)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    fresh_db.create(DATABASE)
    import cycle as bench_cycle

    from jobs import cycle

    bench_cycle.build(1000, 10_000, rng, 0.0)
    while cycle.run_cycle().placed:
        pass
    add_history(args.history, rng)
    from django.db import connection

    with connection.cursor() as cursor:  # as autovacuum would have, after the bulk inserts
        cursor.execute("ANALYZE")
    from jobs import budgets

    spent = budgets.spent_gpu_seconds(list(range(1, 9)), at())
    print(f"loaded at {at():%Y-%m-%d %H:%M} UTC")
    print(f"history: {args.history} ended attempts this month; GPU-hours per tenant: "
          f"{', '.join(f'{s / 3600:.0f}' for s in spent.values())}")  # fmt: skip
    for rolled in (False, True):
        if rolled:
            from jobs import rollup

            days = rollup.roll_up(at())
            print(f"rolled up {days} days")
        without, budgeted = [], []
        timed_load()  # warm
        for _ in range(args.rounds):
            budget_all(None)
            without.append(timed_load())
            budget_all(10_000_000)
            budgeted.append(timed_load())
        a, b = statistics.median(without), statistics.median(budgeted)
        print(f"load without budgets: median {a:.3f} s; every tenant budgeted: median {b:.3f} s "
              f"({args.rounds} rounds, alternated)")  # fmt: skip
        print(f"budget load ratio{' with the roll-up' if rolled else ''}: {b / a:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
