"""Benchmark: what finding queued jobs of images their tenant no longer allows adds to a
placement cycle's snapshot (`jobs.snapshot.disallowed`).

    python bench/cycle.py && python bench/disallowed_images.py [--repeat 15]

On the database bench/cycle.py leaves (`mlsched_bench`, or $BENCH_DATABASE): the queued jobs a
cycle reads, then the median milliseconds of `disallowed` on them and the tenants the snapshot
reads anyway (no query of its own) with no tenant limiting its images, of a whole
`snapshot.load` beside it, and of `disallowed` once every tenant has two patterns that refuse
every queued job (a match per tenant and image). The patterns are put back as they were.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

fresh_db.use(os.environ.get("BENCH_DATABASE", "mlsched_bench"))


def median_ms(fn, repeat: int) -> float:
    took = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    import django

    django.setup()
    from jobs import snapshot
    from quotas.models import Tenant

    now = time.time()
    queued = list(snapshot.queued_jobs(now))
    assert queued, "run bench/cycle.py first: it leaves the queue this reads"
    tenants = {job["tenant_id"] for job in queued}
    print(f"{len(queued)} queued jobs of {len(tenants)} tenants")
    stored = dict(Tenant.objects.values_list("id", "allowed_images"))

    def every():
        return list(Tenant.objects.prefetch_related("quotas").order_by("id"))

    Tenant.objects.update(allowed_images="")
    try:
        read = every()
        assert snapshot.disallowed(queued, read) == {}
        took = median_ms(lambda: snapshot.disallowed(queued, read), args.repeat)
        print(f"disallowed, no patterns: {took:.2f} ms")
        load = median_ms(lambda: snapshot.load(now), max(3, args.repeat // 2))
        print(f"snapshot.load: {load:.1f} ms")
        Tenant.objects.update(allowed_images="registry.example.com/*\nghcr.io/team/*")
        read = every()
        refused = len(snapshot.disallowed(queued, read))
        took = median_ms(lambda: snapshot.disallowed(queued, read), args.repeat)
        print(f"disallowed, two patterns each refusing all {refused}: {took:.2f} ms")
    finally:
        for pk, patterns in stored.items():
            Tenant.objects.filter(pk=pk).update(allowed_images=patterns)


if __name__ == "__main__":
    main()
