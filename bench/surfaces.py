"""Benchmark: every page and endpoint a user or an admin opens, on a platform at production size.

    python bench/surfaces.py [--before DIR] [--jobs 200000] [--repeat 5] [--out FILE]

In a fresh database (`mlsched_bench_surfaces`, or `BENCH_DATABASE`, on `BENCH_SERVER_URL`'s
server, default local PostgreSQL): 50 tenants, 500 users, `--jobs` jobs (3,000 queued and 300
running at the end of the id range, the rest finished over ~46 days, 20% of them in tenant
t00), among them a 10,000-shard batch of t00 submitted early; two attempts for half the jobs
that ran (about 300,000), one allocation per attempt, an event per transition (about 1.1
million), 20 log lines for every third attempt (about 2 million), 20 clusters of 100 nodes, 3
quotas per tenant, 3 API tokens per user, a few hundred guardian grants. Then VACUUM ANALYZE.

Who asks: `member` (a member of t00, the big tenant, which owns the batch), `root` (a
superuser) and `tadmin` (staff owning t01, a tenant of typical size, with the view permissions
and the tenant and membership ones). Each surface is requested through Django's test client
(the whole request, one warm-up first); the median of `--repeat` requests in milliseconds, and
the number of SQL queries one request makes.

With `--before DIR` (a checkout of the code before the fixes, e.g. `git archive HEAD | tar -x
-C DIR`), the database is migrated and filled with DIR's code and measured with it, then
migrated with this checkout's migrations (new indexes) and measured again: both columns come
from one run on one database. The table goes to `--out` (default bench/results/surfaces.md).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATABASE = os.environ.get("BENCH_DATABASE", "mlsched_bench_surfaces")
SERVER = os.environ.get("BENCH_SERVER_URL", "postgresql://postgres:postgres@127.0.0.1:5432")
BATCH_SHARDS = 10_000
TENANTS, USERS, CLUSTERS, NODES_PER_CLUSTER = 50, 500, 20, 100
SLOW_MS = 300


def setup_django(tree: Path) -> None:
    sys.path.insert(0, str(tree))
    os.environ["DATABASE_URL"] = f"{SERVER}/{DATABASE}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "mlsched_site.settings"
    os.environ.setdefault("SECRET_KEY", "mlsched-bench")  # a throwaway database
    os.environ["MLSCHED_API_RATE"] = "100000/minute"
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()


# 1. The data, written by PostgreSQL itself (INSERT ... SELECT over generate_series).

SQL = """
INSERT INTO quotas_tenant (id, name, slug, fair_share_weight, cohort, created)
SELECT t, 'Team ' || lpad((t - 1)::text, 2, '0'), 't' || lpad((t - 1)::text, 2, '0'), 1,
       'default', now() FROM generate_series(1, {tenants}) t;
INSERT INTO quotas_membership (tenant_id, user_id, role)
SELECT 1 + (u - 1) % {tenants}, {u0} + u, CASE WHEN u <= {tenants} THEN 'owner' ELSE 'member' END
FROM generate_series(1, {users}) u;
INSERT INTO quotas_quota (tenant_id, flavor, guaranteed, borrow_limit)
SELECT t, f, 8, 8 FROM generate_series(1, {tenants}) t,
       unnest(ARRAY['cpu', 'memory', 'gpu:A100']) f;
INSERT INTO quotas_apitoken (user_id, name, prefix, key_hash, created)
SELECT {u0} + 1 + (k - 1) % {users}, 'token ' || k, 'mls_' || substr(md5(k::text), 1, 8),
       md5(k::text) || md5('x' || k), now() FROM generate_series(1, 3 * {users}) k;
INSERT INTO clusters_cluster (id, name, backend, region, labels, health, last_heartbeat,
                              agent_token_hash)
SELECT c, 'c' || lpad(c::text, 2, '0'), 'local', 'r1', '{{}}', 'healthy', now(), ''
FROM generate_series(1, {clusters}) c;
INSERT INTO clusters_node (id, cluster_id, name, cpu_milli, memory_mb, gpu_type, gpu_count,
                           gpu_shareable, topology, schedulable, healthy, last_seen)
SELECT n, 1 + (n - 1) / {per_cluster}, 'node-' || n, 96000, 1024000,
       CASE WHEN n <= {nodes} / 2 THEN 'A100' WHEN n <= {nodes} * 3 / 4 THEN 'H100' ELSE 'T4' END,
       8, n > {nodes} * 3 / 4, '{{}}', true, true, now()
FROM generate_series(1, {nodes}) n;

CREATE TEMP TABLE spec AS
SELECT g,
       CASE WHEN g BETWEEN {b0} AND {b1} THEN 1 WHEN g % 5 = 0 THEN 1
            ELSE 2 + g % ({tenants} - 1) END AS tenant,
       CASE WHEN g BETWEEN {b0} AND {b1} THEN
                 CASE WHEN g - {b0} < 7000 THEN 'succeeded' WHEN g - {b0} < 7200 THEN 'running'
                      ELSE 'queued' END
            WHEN g > {jobs} - 3000 THEN 'queued'
            WHEN g > {jobs} - 3300 THEN 'running'
            WHEN g % 20 = 0 THEN 'failed' WHEN g % 20 = 1 THEN 'canceled'
            ELSE 'succeeded' END AS state,
       now() - make_interval(secs => ({jobs} - least(g, {b1})) * 20) AS created
FROM generate_series(1, {jobs}) g;
INSERT INTO jobs_job (id, tenant_id, owner_id, name, family, image, command, env, cpu_milli,
    memory_mb, gpus, gpu_milli, gpu_types, cluster_selector, workers, shards, parent_id,
    shard_index, priority_class_id, priority, preemptible, max_runtime_s, max_retries,
    retry_user_errors, retries_used, state, pending_reason, pending_message, created,
    scheduled_at, started_at, finished_at)
SELECT g, tenant, {u0} + tenant + {tenants} * (g % 10), 'job-' || g,
       CASE WHEN g BETWEEN {b0} AND {b1} THEN 'batch_inference'
            ELSE (ARRAY['training', 'evaluation', 'batch_inference'])[1 + g % 3] END,
       'python:3.11', '["python", "train.py"]', '{{}}', 4000, 16000, 1, 0, '[]', '{{}}', 1,
       CASE WHEN g BETWEEN {b0} AND {b1} THEN {shards} ELSE 1 END,
       CASE WHEN g > {b0} AND g <= {b1} THEN {b0} END,
       CASE WHEN g BETWEEN {b0} AND {b1} THEN g - {b0} ELSE 0 END,
       2, 0, true, 3600, 3, false, 0, state,
       CASE WHEN state = 'queued' THEN 'quota' ELSE '' END,
       CASE WHEN state = 'queued' THEN 'Waiting for quota.' ELSE '' END, created,
       CASE WHEN state <> 'queued' THEN created + interval '30 s' END,
       CASE WHEN state <> 'queued' THEN created + interval '60 s' END,
       CASE WHEN state IN ('succeeded', 'failed', 'canceled')
            THEN created + interval '660 s' END
FROM spec;

INSERT INTO jobs_attempt (job_id, number, cluster_id, outcome, exit_code, reason, scheduled_at,
    started_at, ended_at, stop_reason, wasted_gpu_seconds)
SELECT j.id, n, 1 + j.id % {clusters},
       CASE WHEN n < last THEN 'preempted' WHEN j.state = 'running' THEN ''
            WHEN j.state = 'failed' THEN 'user_error' ELSE j.state END,
       CASE WHEN j.state = 'failed' AND n = last THEN 1 END, '',
       j.scheduled_at, j.started_at,
       CASE WHEN n < last OR j.state <> 'running' THEN j.started_at + interval '600 s' END,
       '', 0
FROM jobs_job j,
     LATERAL (SELECT CASE WHEN j.id % 2 = 0 AND j.state <> 'running' THEN 2 ELSE 1 END) l(last),
     generate_series(1, l.last) n
WHERE j.state <> 'queued' ORDER BY j.id, n;

INSERT INTO clusters_allocation (attempt_id, worker, slot, node_id, gpu_index, gpu_milli_start,
    gpu_milli, cpu_milli, memory_mb, borrowed, active, created, released)
SELECT id, 0, 0, 1 + (rn - 1) % {nodes}, ((rn - 1) / {nodes}) % 8, 0, 1000, 4000, 16000,
       false, true, scheduled_at, NULL
FROM (SELECT id, scheduled_at, row_number() OVER (ORDER BY id) rn
      FROM jobs_attempt WHERE outcome = '') live;
INSERT INTO clusters_allocation (attempt_id, worker, slot, node_id, gpu_index, gpu_milli_start,
    gpu_milli, cpu_milli, memory_mb, borrowed, active, created, released)
SELECT id, 0, 0, 1 + id % {nodes}, id % 8, 0, 1000, 4000, 16000, false, false, scheduled_at,
       ended_at
FROM jobs_attempt WHERE outcome <> '';

INSERT INTO jobs_jobevent (job_id, attempt_id, from_state, to_state, reason, time)
SELECT id, NULL, '', 'queued', 'submitted', created FROM jobs_job;
INSERT INTO jobs_jobevent (job_id, attempt_id, from_state, to_state, reason, time)
SELECT a.job_id, a.id, (ARRAY['queued', 'scheduled', 'running'])[k],
       CASE k WHEN 1 THEN 'scheduled' WHEN 2 THEN 'running'
              ELSE CASE WHEN a.outcome = 'preempted' THEN 'queued' ELSE j.state END END,
       '', a.scheduled_at + make_interval(secs => k * 30)
FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id, generate_series(1, 3) k
WHERE k < 3 OR a.outcome <> '' ORDER BY a.job_id, a.id, k;

INSERT INTO jobs_logchunk (attempt_id, worker, seq, stream, text, created)
SELECT a.id, 0, s, 'stdout', 'step ' || s || ': loss 0.1234, 312 samples/s', a.started_at
FROM jobs_attempt a, generate_series(1, 20) s WHERE a.id % 3 = 0 ORDER BY a.id, s;

INSERT INTO jobs_schedulershard (name, last_cycle_at, last_commit_at, cycles, placements,
    last_cycle_seconds, last_cycle_jobs)
VALUES ('default', now(), now(), 1000, 5000, 0.2, 3000);
"""


# Columns added after the INSERTs below were written: their values while they fill.
LATER_COLUMNS = {("jobs_job", "held"): "''", ("jobs_job", "singleton"): "false"}


def build(jobs: int) -> None:
    from django.contrib.auth.models import Permission, User
    from django.contrib.contenttypes.models import ContentType
    from django.db import connection
    from guardian.models import UserObjectPermission

    from jobs.models import Job
    from quotas.models import ApiToken, Membership, PriorityClass, Tenant

    users = User.objects.bulk_create(
        User(username=f"user{u:03d}", password="!") for u in range(1, USERS + 1)
    )
    u0 = users[0].pk - 1  # guardian's anonymous user came first
    assert users[-1].pk == u0 + USERS
    PriorityClass.objects.bulk_create([
        PriorityClass(id=1, name="low", value=-10),
        PriorityClass(id=2, name="normal", value=0),
        PriorityClass(id=3, name="high", value=100, may_preempt=True),
    ])  # fmt: skip
    b0 = jobs // 4
    with connection.cursor() as cursor:
        # Columns the SQL does not name, which Django fills: given defaults while it runs, where
        # the code measured has them.
        cursor.execute("SELECT table_name, column_name FROM information_schema.columns "
                       "WHERE table_schema = current_schema()")  # fmt: skip
        present = set(cursor.fetchall())
        later = {key: value for key, value in LATER_COLUMNS.items() if key in present}
        for (table, column), value in later.items():
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT {value}")
        cursor.execute(
            SQL.format(
                u0=u0,
                tenants=TENANTS,
                users=USERS,
                clusters=CLUSTERS,
                per_cluster=NODES_PER_CLUSTER,
                nodes=CLUSTERS * NODES_PER_CLUSTER,
                jobs=jobs,
                b0=b0,
                b1=b0 + BATCH_SHARDS - 1,
                shards=BATCH_SHARDS,
            )  # fmt: skip
        )
        for table in ("quotas_tenant", "quotas_priorityclass", "clusters_cluster",
                      "clusters_node", "jobs_job"):  # fmt: skip
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM "
                f"{table}))"
            )
        for table, column in later:
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT")
    PriorityClass.objects.get(name="high").tenants.set(Tenant.objects.filter(pk__lte=5))
    t00, t01 = Tenant.objects.get(slug="t00"), Tenant.objects.get(slug="t01")
    member = User.objects.create(username="member")
    Membership.objects.create(tenant=t00, user=member)
    for n in range(20):
        ApiToken.objects.create(user=member, name=f"laptop {n}", prefix=f"mls_{n:08d}",
                                key_hash=f"{n:064d}")  # fmt: skip
    tadmin = User.objects.create(username="tadmin", is_staff=True)
    Membership.objects.create(tenant=t01, user=tadmin, role=Membership.Role.OWNER)
    tadmin.user_permissions.set(
        Permission.objects.filter(codename__startswith="view_")
        | Permission.objects.filter(content_type__model__in=["tenant", "membership"])
    )
    User.objects.create(username="root", is_staff=True, is_superuser=True)
    view_job = Permission.objects.get(codename="view_job")
    kind = ContentType.objects.get_for_model(Job)
    UserObjectPermission.objects.bulk_create(
        UserObjectPermission(user_id=u0 + 1 + n % USERS, permission=view_job, content_type=kind,
                             object_pk=str(1 + n * 997 % jobs))
        for n in range(500)
    )  # fmt: skip
    UserObjectPermission.objects.bulk_create(
        UserObjectPermission(user=member, permission=view_job, content_type=kind,
                             object_pk=str(2 + n * 7919))
        for n in range(5)
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


# 2. The surfaces: who opens what.


def surfaces() -> list[tuple[str, str, str]]:
    """(name, user, url) for every surface measured."""
    from django.utils import timezone

    from clusters.models import Allocation, Cluster, Node
    from jobs.models import Attempt, Job, LogChunk
    from quotas.models import ApiToken, PriorityClass, Quota, Tenant

    batch = Job.objects.get(parent=None, shards=BATCH_SHARDS)
    job = Job.objects.filter(tenant__slug="t00", shards=1, state="succeeded").order_by("id").last()
    line = LogChunk.objects.filter(attempt__job=job).order_by("id").last() or LogChunk(pk=0)
    rows = {}
    for who, slug in (("root", "t00"), ("tadmin", "t01")):
        mine = Job.objects.filter(tenant__slug=slug, shards=1, state="succeeded").order_by("id")
        last = mine.filter(id__in=Attempt.objects.filter(number=2).values("job")).last()
        attempt = last.attempts.order_by("number").last()
        rows[who] = {
            "job": last.pk, "attempt": attempt.pk, "jobevent": last.events.last().pk,
            "logchunk": LogChunk.objects.filter(attempt__job__tenant__slug=slug).last().pk,
            "allocation": Allocation.objects.filter(attempt=attempt).get().pk,
            "tenant": Tenant.objects.get(slug=slug).pk,
            "quota": Quota.objects.filter(tenant__slug=slug).first().pk,
        }  # fmt: skip
    platform = {
        "node": Node.objects.order_by("id").last().pk, "cluster": Cluster.objects.first().pk,
        "priorityclass": PriorityClass.objects.get(name="high").pk,
        "apitoken": ApiToken.objects.order_by("id").last().pk,
    }  # fmt: skip
    # Usage windows: 30 days holding ~150,000 of the jobs (those after the batch were all
    # submitted ~32 days ago), and the longest window, holding all of them.
    today = timezone.now().date()
    month = f"since={today - timedelta(days=35)}&until={today - timedelta(days=5)}"
    year = f"since={today - timedelta(days=365)}&until={today + timedelta(days=1)}"
    found = [
        ("portal index (job list)", "member", "/"),
        ("portal job page", "member", f"/jobs/{job.pk}/"),
        ("portal batch page (10,000 shards)", "member", f"/jobs/{batch.pk}/"),
        ("overview (platform figures cached)", "member", "/overview/"),
        ("overview (platform figures recomputed)", "member", "/overview/?cold"),
        ("submit form", "member", "/jobs/new/"),
        ("API tokens page", "member", "/tokens/"),
        ("API jobs", "member", "/api/v1/jobs/"),
        ("API jobs ?state=queued", "member", "/api/v1/jobs/?state=queued"),
        ("API jobs ?state=succeeded", "member", "/api/v1/jobs/?state=succeeded"),
        ("API jobs ?batch= (10,000 shards)", "member", f"/api/v1/jobs/?batch={batch.pk}"),
        ("API jobs ?before= (page 10)", "member", f"/api/v1/jobs/?before={job.pk}"),
        ("API job (batch: shard_states)", "member", f"/api/v1/jobs/{batch.pk}/"),
        ("API job events", "member", f"/api/v1/jobs/{job.pk}/events/"),
        ("API job logs ?after= (nothing new)", "member",
         f"/api/v1/jobs/{job.pk}/logs/?after={line.pk}"),
        ("API job logs (first page)", "member", f"/api/v1/jobs/{job.pk}/logs/"),
        ("usage page (30 days)", "member", f"/usage/?{month}"),
        ("usage CSV (30 days)", "member", f"/usage.csv?{month}"),
        ("API usage (30 days)", "member", f"/api/v1/usage/?{month}"),
        ("API usage (366 days)", "member", f"/api/v1/usage/?{year}"),
        ("usage page, every tenant (30 days)", "root", f"/usage/?{month}"),
        ("API usage, every tenant (30 days)", "root", f"/api/v1/usage/?{month}"),
        ("API usage, every tenant (366 days)", "root", f"/api/v1/usage/?{year}"),
        ("API usage (30 days)", "tadmin", f"/api/v1/usage/?{month}"),
    ]  # fmt: skip
    for who in ("root", "tadmin"):
        ids = {**rows[who], **platform}
        for app, model in (("jobs", "job"), ("jobs", "attempt"), ("jobs", "jobevent"),
                           ("jobs", "logchunk"), ("clusters", "allocation"),
                           ("clusters", "node"), ("clusters", "cluster"), ("quotas", "tenant"),
                           ("quotas", "quota"), ("quotas", "priorityclass"),
                           ("quotas", "apitoken")):  # fmt: skip
            if who == "tadmin" and model == "apitoken":
                continue  # tenant admins see no tokens
            found.append((f"admin {model} list", who, f"/admin/{app}/{model}/"))
            found.append((f"admin {model} page", who, f"/admin/{app}/{model}/{ids[model]}/change/"))
        found.append(("admin job list ?state=queued", who, "/admin/jobs/job/?state__exact=queued"))
    return found


def timed_gets(client, path: str, repeat: int) -> tuple[list[float], list[tuple[str, object]]]:
    """Milliseconds of `repeat` GETs of `path` after a warm-up one (which must answer 200), and
    the statements (SQL, parameters) one more GET ran, caught by a wrapper: each request's start
    clears connection.queries."""
    from django.db import connection

    response = client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    statements = []

    def keep(run, sql, params, many, context):
        statements.append((sql, params))
        return run(sql, params, many, context)

    with connection.execute_wrapper(keep):
        client.get(path)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(path)
        times.append((time.perf_counter() - started) * 1000)
    return times, statements


def measure(repeat: int) -> dict[str, dict]:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.cache import caches
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    clients = {}
    for name in ("member", "root", "tadmin"):
        clients[name] = Client()
        clients[name].force_login(User.objects.get(username=name))
    results = {}
    for name, who, url in surfaces():
        cold = url.endswith("?cold")
        settings.MLSCHED_METRICS_CACHE_S = 0 if cold else 10
        times, statements = timed_gets(clients[who], url, repeat)
        caches["shared"].clear()
        results[name + (" [tenant admin]" if who == "tadmin" else "")] = {
            "ms": statistics.median(times), "queries": len(statements), "url": url, "who": who,
        }  # fmt: skip
        print(f"{name} ({who}): {results[name if who != 'tadmin' else name + ' [tenant admin]']}",
              file=sys.stderr)  # fmt: skip
    return results


# 3. The run: one database, the code before and after.


def phase(tree: Path, *args: str) -> str:
    """Run a phase of this script with `tree`'s code in a child process; its stdout."""
    command = [sys.executable, __file__, "--tree", str(tree), *args]
    # In `tree`: the settings put the working directory first on sys.path.
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, cwd=tree)
    return done.stdout


def create_database() -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")


def write(path: Path, command: str, args, before: dict | None, after: dict, build_s: float):
    lines = [f"Command: `{command}`", ""]
    lines.append(
        f"{args.jobs:,} jobs (a {BATCH_SHARDS:,}-shard batch among them), {TENANTS} tenants, "
        f"{USERS} users, {CLUSTERS * NODES_PER_CLUSTER:,} nodes; built in {build_s:.0f} s. "
        f"Median of {args.repeat} requests after a warm-up, PostgreSQL on this machine; "
        "queries: one request's SQL statements. `member` belongs to t00 (the big tenant, owner "
        "of the batch); `root` is a superuser; `[tenant admin]` rows are `tadmin`, staff owning "
        "t01. Both columns were measured in this one run on this one database."
    )
    lines.append("")
    if before:
        lines.append("| surface | before ms | before queries | after ms | after queries | "
                     "ratio |")  # fmt: skip
        lines.append("|---|---:|---:|---:|---:|---:|")
        for name, now in after.items():
            was = before[name]
            lines.append(f"| {name} | {was['ms']:,.1f} | {was['queries']} | {now['ms']:,.1f} | "
                         f"{now['queries']} | {was['ms'] / now['ms']:.1f}x |")  # fmt: skip
    else:
        lines.append("| surface | ms | queries |")
        lines.append("|---|---:|---:|")
        for name, now in after.items():
            lines.append(f"| {name} | {now['ms']:,.1f} | {now['queries']} |")
    slow = [name for name, now in after.items() if now["ms"] > SLOW_MS]
    lines += ["", f"Over {SLOW_MS} ms after: {', '.join(slow) or 'none'}.", "", NOTES]
    path.write_text("\n".join(lines))


NOTES = """What changed between the columns (tests in tests/jobs/test_query_counts.py):

- Admin changelists of jobs, attempts, events, log lines and allocations (`jobs.admin.BigTable`):
  newest first by the primary key (the models' orderings follow foreign keys to
  `Job.created`: attempts and log lines sorted the whole table through a join to the jobs, events
  sorted a million rows by time), counted once (`show_full_result_count = False`) and only up
  to 10,000 rows (`CappedPaginator`; the page then says "10000+").
- The job changelist's tenant filter lists the tenants the user administers instead of reading
  every job's tenant (`SELECT DISTINCT tenant_id` over the job table).
- The cluster page lists its nodes as one table linking to each node's page (an inline form per
  node: ~5 ms each to render, plus a query per node for its label).
- `GET /api/v1/jobs/?batch=`: bounded by the batch's last shard (`Job.rows_of_batch`, index
  `job_shard_parent_id`); PostgreSQL walked the primary key back from the newest job, 140,001
  rows for this batch.

Rows whose code did not change differ by up to about 2.5x either way between the columns: that
is this 2-core machine's noise, not a change.
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="a checkout of the code before the fixes")
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/surfaces.md")
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=["migrate", "build", "measure"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        setup_django(args.tree)
        if args.phase == "migrate":
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
        elif args.phase == "build":
            build(args.jobs)
        else:
            print(json.dumps(measure(args.repeat)))
        return
    first = args.before or ROOT
    create_database()
    started = time.perf_counter()
    phase(first, "--phase", "migrate")
    phase(first, "--phase", "build", "--jobs", str(args.jobs))
    build_s = time.perf_counter() - started
    print(f"built in {build_s:.0f} s", file=sys.stderr)
    before = None
    if args.before:
        before = json.loads(phase(args.before, "--phase", "measure", "--repeat", str(args.repeat)))
        phase(ROOT, "--phase", "migrate")
    after = json.loads(phase(ROOT, "--phase", "measure", "--repeat", str(args.repeat)))
    command = ".venv/bin/python " + " ".join(["bench/surfaces.py", *sys.argv[1:]])
    write(args.out, command, args, before, after, build_s)


if __name__ == "__main__":
    main()
