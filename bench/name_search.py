"""Benchmark: searching jobs by name in the portal and the admin, without and with the trigram
index on job names (migration jobs/0022_job_name_trigram).

    python bench/name_search.py [--jobs 200000] [--rounds 3] [--repeat 5] [--out FILE]

In a fresh database (`mlsched_bench_name_search`, or `BENCH_DATABASE`, on `BENCH_SERVER_URL`'s
server, default local PostgreSQL): bench/surfaces.py's platform (`--jobs` jobs, 20% of them in
tenant t00, 50 tenants, attempts, events, log lines), whose jobs are then named as teams name
them, `<model>-<task>-<8 hex digits>` (8 models, 5 tasks), except six jobs named
`whisper-distill-ablation-<id>`, two of them in t00. Then VACUUM ANALYZE.

Four searches: a rare name (`ablation`: six jobs), a common one (`bert`: one job in 8), and two
searches of two characters, too short to hold a trigram: a common one (`t5`: one job in 8) and
one that finds nothing (`zq`). Each through Django's test client (the whole request, one
warm-up first): the portal's job list `/?q=` for `member` (a member of t00: tenant-first
visibility plus a few guardian grants), the admin's job changelist `/admin/jobs/job/?q=` for
`root` (a superuser: every job) and for `tadmin` (staff owning t01), and, for comparison, the
admin's changelist for `root` with the search fields it had before (`["name", "id"]`). The SQL
statements of a request that search names are run again under EXPLAIN (ANALYZE, BUFFERS): the
indexes of the jobs table they used, their time in the database and the pages they read.

Without and with the index, in `--rounds` rounds: the index is dropped, each request is made
`--repeat` times, the index is built as the migration builds it (CREATE INDEX CONCURRENTLY,
then ANALYZE) and each request is made `--repeat` times again. Both columns come from one run on
one database, interleaved so that the machine's other load weighs on both alike; a median is
over all rounds' requests, the plans are the last round's. The table goes to `--out` (default
bench/results/name_search.md).
"""

import argparse
import importlib
import os
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fresh_db  # noqa: E402
import surfaces  # noqa: E402
from plans import drop_index, explain, index_size, tables, without_and_with  # noqa: E402

DATABASE = os.environ.get("BENCH_DATABASE", "mlsched_bench_name_search")
fresh_db.use(DATABASE)
MIGRATION = importlib.import_module("jobs.migrations.0022_job_name_trigram")  # its statements

MODELS = ["bert", "gpt2", "resnet50", "vit", "llama", "whisper", "t5", "clip"]
TASKS = ["pretrain", "finetune", "eval", "sweep", "distill"]
RARE = [3, 11, 25_001, 60_005, 120_013, 199_000]  # job ids; t00 holds ids divisible by 5
SEARCHES = [
    ("rare name", "ablation"),
    ("common name", "bert"),
    ("2 characters", "t5"),
    ("2 characters, no match", "zq"),
]
SURFACES = [
    ("portal job list", "member", "/?q={q}"),
    ("admin job changelist", "root", "/admin/jobs/job/?q={q}"),
    ("admin job changelist [tenant admin]", "tadmin", "/admin/jobs/job/?q={q}"),
    (OLD_ADMIN := "admin job changelist, searching ids as text", "root", "/admin/jobs/job/?q={q}"),
]

NAMES = """
UPDATE jobs_job SET name = (ARRAY{models})[1 + id % {n_models}] || '-'
    || (ARRAY{tasks})[1 + (id / {n_models}) % {n_tasks}] || '-' || substr(md5(id::text), 1, 8);
UPDATE jobs_job SET name = 'whisper-distill-ablation-' || id WHERE id = ANY(ARRAY{rare});
"""


def build(jobs: int) -> None:
    from django.db import connection

    drop_index(MIGRATION.INDEX)
    surfaces.build(jobs)  # ends with VACUUM ANALYZE
    with connection.cursor() as cursor:
        cursor.execute(
            NAMES.format(
                models=MODELS, n_models=len(MODELS), tasks=TASKS, n_tasks=len(TASKS), rare=RARE
            )
        )
        cursor.execute("VACUUM ANALYZE jobs_job")


def create_index() -> float:
    """Seconds to build the index as the migration does."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        for sql in MIGRATION.CREATE:
            cursor.execute(sql)
    return time.perf_counter() - started


@contextmanager
def searching_ids_as_text():
    """The job admin's search as it was: `search_fields = ["name", "id"]`, which ORs
    `UPPER(id::text) LIKE '%q%'` to the name's condition."""
    from django.contrib import admin

    from jobs.models import Job

    job_admin = admin.site._registry[Job]
    job_admin.search_fields = ["name", "id"]
    job_admin.get_search_results = partial(admin.ModelAdmin.get_search_results, job_admin)
    try:
        yield
    finally:
        del job_admin.search_fields, job_admin.get_search_results


def measure(clients: dict, repeat: int) -> dict[str, dict]:
    """Each surface and search: its requests' times, and the plans of its name searches."""
    results = {}
    for surface, who, url in SURFACES:
        for search, q in SEARCHES:
            with searching_ids_as_text() if surface == OLD_ADMIN else nullcontext():
                name = f"{surface}: {search} `{q}`"
                results[name] = measure_one(clients[who], url.format(q=q), repeat)
            print(f"{name}: {statistics.median(results[name]['times']):.1f} ms", file=sys.stderr)
    return results


def measure_one(client, path: str, repeat: int) -> dict:
    """Its requests' times, and the plans of the statements that search names."""
    times, statements = surfaces.timed_gets(client, path, repeat)
    searched = [explain(sql, params) for sql, params in statements if "LIKE" in sql]
    return {"times": times, "statements": searched}


def clients() -> dict:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    logged_in = {}
    for name in ("member", "root", "tadmin"):
        logged_in[name] = Client()
        logged_in[name].force_login(User.objects.get(username=name))
    return logged_in


def write(path: Path, command: str, args, before, after, build_s, builds, size):
    lines = [f"Command: `{command}`", ""]
    lines.append(
        f"{args.jobs:,} jobs (bench/surfaces.py's platform, jobs named `<model>-<task>-<hex>`), "
        f"built in {build_s:.0f} s. Searches: `ablation` (6 jobs, 2 visible to `member`), "
        "`bert` (1 job in 8), `t5` (1 job in 8) and `zq` (none); two characters hold no "
        f"trigram. Median of {args.rounds} x {args.repeat} requests after a warm-up, PostgreSQL "
        "on this machine; `member` belongs to t00 (20% of the jobs), `root` is a superuser, "
        "`[tenant admin]` is `tadmin`, staff owning t01. Both columns were measured in this one "
        f"run on this one database, in {args.rounds} rounds: the index dropped, then built as "
        "the migration builds it (CREATE INDEX CONCURRENTLY, then ANALYZE) in "
        f"{', '.join(f'{s:.1f}' for s in builds)} s; {size}."
    )
    lines += tables(
        "search",
        before,
        after,
        "The statements that search names, run again under EXPLAIN (ANALYZE, BUFFERS), last "
        "round: the jobs table's indexes used (jobs_job_pkey: newest first by id, walked back "
        "until the page is full; jobs_job_tenant_id_...: a tenant's jobs; job_name_trgm: the "
        "trigram index) or its sequential scan, the time in the database and the pages read. "
        "The admin's first statement counts the matches (up to 10,001), the second reads the "
        "page.",
    )
    lines += ["", NOTES]
    path.write_text("\n".join(lines) + "\n")


NOTES = """Reading the plans:

- A rare name: without the index the portal reads t00's 48,000 jobs through the tenant index
  and checks each name, and the admin reads the whole table twice (the count, then the page);
  with it, both read the six matches from the trigram index. A tenant admin's search reads
  their tenant's jobs through the tenant index without it, the few matches with it.
- A common name: the portal walks the primary key back from the newest job until its page of
  50 is full, with or without the index (the planner knows, from the statistics of the indexed
  expression that the migration's ANALYZE gathers, that matches are many). The admin's count
  reads its first 10,001 matches, through the index rather than by scanning the table.
- Two characters hold no trigram: the index cannot narrow them. A common one keeps the plans
  it had. One that matches nothing reads every visible job with or without the index; with
  it, the expression's statistics tell the planner that matches are few, and the portal reads
  t00's jobs through the tenant index instead of walking the whole primary key back.
- Ids searched as text (`"id"` among the admin's search fields, `UPPER(id::text) LIKE`) ORed
  with the name's condition: no index serves it, and the admin scans the table with the
  trigram index as without. The admin now matches a whole number against ids exactly
  (`JobAdmin.get_search_results`), a primary key lookup ORed with the trigram index's.
- Request times include rendering the page (the admin's changelist: 100 rows). Other work
  loaded this 2-core machine during the run: rows whose plans are the same in both columns
  differ by up to 1.3x either way, which is noise; the pages read are the steady measure.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/name_search.md")
    args = parser.parse_args()
    started = time.perf_counter()
    fresh_db.create(DATABASE)
    build(args.jobs)  # without the index
    build_s = time.perf_counter() - started
    print(f"built in {build_s:.0f} s", file=sys.stderr)
    logged_in = clients()
    before, after, builds = without_and_with(
        args.rounds,
        lambda: measure(logged_in, args.repeat),
        MIGRATION.INDEX,
        create_index,
    )
    command = ".venv/bin/python " + " ".join(["bench/name_search.py", *sys.argv[1:]])
    write(args.out, command, args, before, after, build_s, builds,
          index_size(MIGRATION.INDEX))  # fmt: skip


if __name__ == "__main__":
    main()
