"""Benchmark: the job lists narrowed by a label (`?label=key=value`), without and with the GIN
index of jobs' labels (migration jobs/0030_job_labels).

    python bench/label_filter.py [--jobs 200000] [--rounds 3] [--repeat 5] [--out FILE]

In a fresh database (`mlsched_bench_label_filter`, or `BENCH_DATABASE`, on `BENCH_SERVER_URL`'s
server, default local PostgreSQL): bench/surfaces.py's platform (`--jobs` jobs, 20% of them in
tenant t00, 50 tenants), whose jobs are then labelled as teams label them: every job a
`project` (one of 8) and a `sweep` (one of 500), and six jobs `experiment=ablation`, two of
them in t00. Then VACUUM ANALYZE.

Four filters, each through Django's test client (the whole request, one warm-up first) on the
portal's job list `/?label=` and the API's `GET /api/v1/jobs/?label=` for `member` (a member
of t00): a rare label (`experiment=ablation`: six jobs), a common one (`project=llm`: one job
in 8), an uncommon one (`sweep=s7`: one in 500) and one no job carries (`experiment=none`).
The statements that filter on labels are run again under EXPLAIN (ANALYZE, BUFFERS).

Without and with the index, in `--rounds` rounds: the index dropped, each request made
`--repeat` times, the index built as the migration builds it (CREATE INDEX CONCURRENTLY) and
each request made `--repeat` times again; a median is over all rounds' requests, the plans are
the last round's. The table goes to `--out` (default bench/results/label_filter.md).
"""

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fresh_db  # noqa: E402
import surfaces  # noqa: E402
from plans import drop_index, explain, index_size, tables, without_and_with  # noqa: E402

DATABASE = os.environ.get("BENCH_DATABASE", "mlsched_bench_label_filter")
fresh_db.use(DATABASE)
MIGRATION = importlib.import_module("jobs.migrations.0030_job_labels")  # its statements

PROJECTS = ["llm", "vision", "speech", "recsys", "rl", "search", "ads", "safety"]
RARE = [3, 11, 25_001, 60_005, 120_013, 199_000]  # job ids; t00 holds ids divisible by 5
FILTERS = [
    ("rare label", "experiment=ablation"),
    ("common label", "project=llm"),
    ("uncommon label", "sweep=s7"),
    ("no match", "experiment=none"),
]
SURFACES = [("portal job list", "/?label={label}"), ("API job list", "/api/v1/jobs/?label={label}")]

LABELS = """
UPDATE jobs_job SET labels = jsonb_build_object(
    'project', (ARRAY{projects})[1 + id % {n_projects}], 'sweep', 's' || (id % 500));
UPDATE jobs_job SET labels = labels || '{{"experiment": "ablation"}}' WHERE id = ANY(ARRAY{rare});
"""


def build(jobs: int) -> None:
    from django.db import connection

    drop_index(MIGRATION.INDEX)
    surfaces.build(jobs)  # ends with VACUUM ANALYZE
    with connection.cursor() as cursor:
        cursor.execute(LABELS.format(projects=PROJECTS, n_projects=len(PROJECTS), rare=RARE))
        cursor.execute("VACUUM ANALYZE jobs_job")


def create_index() -> float:
    """Seconds to build the index as the migration does, then its statistics."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(MIGRATION.CREATE)
    took = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    return took


def measure(client, repeat: int) -> dict[str, dict]:
    """Each surface and filter: its requests' times, and the plans of its label filters."""
    results = {}
    for surface, url in SURFACES:
        for what, label in FILTERS:
            name = f"{surface}: {what} `{label}`"
            times, statements = surfaces.timed_gets(client, url.format(label=label), repeat)
            filtered = [explain(sql, p) for sql, p in statements if '"labels" @>' in sql]
            results[name] = {"times": times, "statements": filtered}
            print(f"{name}: {statistics.median(times):.1f} ms", file=sys.stderr)
    return results


def member_client():
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    # A benchmark asks hundreds of times a minute: past the users' request rate.
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
    client = Client()
    client.force_login(User.objects.get(username="member"))
    return client


def write(path: Path, command: str, args, before, after, build_s, builds, size):
    lines = [f"Command: `{command}`", ""]
    lines.append(
        f"{args.jobs:,} jobs (bench/surfaces.py's platform), built in {build_s:.0f} s, each "
        "labelled with a `project` (one of 8) and a `sweep` (one of 500); six jobs carry "
        "`experiment=ablation`, two of them visible to `member`, who belongs to t00 (20% of the "
        f"jobs). Median of {args.rounds} x {args.repeat} requests after a warm-up, PostgreSQL on "
        "this machine. Both columns were measured in this one run on this one database, in "
        f"{args.rounds} rounds: the index dropped, then built as the migration builds it "
        f"(CREATE INDEX CONCURRENTLY) in {', '.join(f'{s:.1f}' for s in builds)} s; {size}."
    )
    lines += tables(
        "filter",
        before,
        after,
        "The statements that filter on labels, run again under EXPLAIN (ANALYZE, BUFFERS), last "
        "round: the jobs table's indexes used (jobs_job_pkey: newest first by id, walked back "
        "until the page is full; jobs_job_tenant_id_...: a tenant's jobs; job_labels_gin: the "
        "labels' index) or its sequential scan, the time in the database and the pages read.",
    )
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/label_filter.md")
    args = parser.parse_args()
    started = time.perf_counter()
    fresh_db.create(DATABASE)
    build(args.jobs)  # without the index
    build_s = time.perf_counter() - started
    print(f"built in {build_s:.0f} s", file=sys.stderr)
    client = member_client()
    before, after, builds = without_and_with(
        args.rounds,
        lambda: measure(client, args.repeat),
        MIGRATION.INDEX,
        create_index,
    )
    command = ".venv/bin/python " + " ".join(["bench/label_filter.py", *sys.argv[1:]])
    write(args.out, command, args, before, after, build_s, builds,
          index_size(MIGRATION.INDEX))  # fmt: skip


if __name__ == "__main__":
    main()
