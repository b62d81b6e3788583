"""/metrics: what it counts, who may read it, and how often the platform-wide part is computed."""

import subprocess
import sys
from datetime import timedelta
from importlib import import_module

import pytest
from django.apps import apps
from django.utils import timezone

from clusters.models import Cluster, MaintenanceWindow
from jobs import actions, cycle, janitor, metrics, snapshot
from jobs.models import Attempt, Job
from jobs.states import State
from tests.factories import (
    AttemptFactory,
    ClusterFactory,
    JobFactory,
    NodeFactory,
    PriorityClassFactory,
    UserFactory,
)
from tests.processes import ROOT, process_env

ORDER = [
    "mlsched_gpus", "mlsched_gpus_idle", "mlsched_gpus_largest_free_block",
    "mlsched_gpus_fragmented", "mlsched_gpus_in_maintenance", "mlsched_gpus_booked_idle",
    "mlsched_nodes", "mlsched_nodes_quarantined", "mlsched_class_gpus", "mlsched_class_gpu_limit",
    "mlsched_jobs",
    "mlsched_jobs_queued_by_reason", "mlsched_gpus_queued_by_reason", "mlsched_queue_wait_seconds",
    "mlsched_queue_wait_seconds_by_tenant", "mlsched_tenant_usage", "mlsched_tenant_quota",
    "mlsched_tenant_recent_gpus", "mlsched_gpu_budget_hours",
    "mlsched_gpu_budget_spent_hours", "mlsched_tenant_spend_month", "mlsched_tenant_spend_alert",
    "mlsched_jobs_finished", "mlsched_job_success_rate",
    "mlsched_attempts_ended", "mlsched_attempts_stopped", "mlsched_preemption_rate",
    "mlsched_wasted_gpu_seconds", "mlsched_cpu_efficiency", "mlsched_memory_unused_gib_hours",
    "mlsched_gpu_efficiency", "mlsched_gpus_held_idle", "mlsched_runtime_efficiency",
    "mlsched_scheduler_last_cycle_age_seconds",
    "mlsched_scheduler_placements_total", "mlsched_scheduler_cycle_seconds",
    "mlsched_scheduler_decisions_per_second", "mlsched_agent_heartbeat_age_seconds",
]  # fmt: skip

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


def test_it_refuses_anonymous_readers(client, settings):
    settings.MLSCHED_METRICS_TOKEN = "scrape-me"

    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403


def test_a_token_with_odd_characters_is_refused_not_an_error(client, settings):
    settings.MLSCHED_METRICS_TOKEN = "scrape-me"

    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer café").status_code == 403


def test_label_values_are_escaped_so_no_value_can_end_its_line(scrape):
    odd = 'A100"} 1\nfake_metric{x="'
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8, gpu_type=odd)

    lines = scrape()

    assert not any(line.startswith("fake_metric") for line in lines)
    escaped = 'A100\\"} 1\\nfake_metric{x=\\"'
    assert f'mlsched_gpus{{cluster="east",gpu_type="{escaped}",state="total"}} 8' in lines


def test_a_platform_admin_may_read_it_and_a_tenant_admin_may_not(client):
    # A tenant admin is staff too, but the figures name every tenant.
    client.force_login(UserFactory(username="tenant-admin", is_staff=True))
    assert client.get("/metrics").status_code == 403

    client.force_login(UserFactory(username="ops", is_staff=True, is_superuser=True))
    assert client.get("/metrics").status_code == 200


def test_it_counts_allocated_and_total_gpus_per_cluster(scrape):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    JobFactory(gpus=3)
    cycle.run_cycle()

    lines = scrape()

    assert 'mlsched_gpus{cluster="east",gpu_type="A100",state="total"} 8' in lines
    assert 'mlsched_gpus{cluster="east",gpu_type="A100",state="allocated"} 3' in lines


def test_it_breaks_idle_gpus_into_whole_gpus_slivers_and_the_largest_block(scrape):
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east, gpu_count=8, gpu_shareable=True)
    NodeFactory(cluster=east, gpu_count=2)
    NodeFactory(cluster=east, gpu_count=8, healthy=False)
    JobFactory(gpus=3)  # on the 8-GPU node: the 2-GPU one is too small
    JobFactory(gpus=0, gpu_milli=250, family="evaluation")
    cycle.run_cycle()

    lines = scrape()

    # 8 + 2 healthy GPUs: 3 whole taken, one shared at 250 milli.
    assert 'mlsched_gpus_idle{cluster="east",gpu_type="A100",kind="whole"} 6' in lines
    assert 'mlsched_gpus_idle{cluster="east",gpu_type="A100",kind="sliver"} 0.75' in lines
    assert 'mlsched_gpus_largest_free_block{cluster="east",gpu_type="A100"} 4' in lines


def test_it_counts_the_quarantined_nodes_of_each_cluster(scrape):
    east = ClusterFactory(name="east")
    ClusterFactory(name="west")  # none quarantined: 0
    NodeFactory(cluster=east, quarantined_at=timezone.now(), schedulable=False)
    NodeFactory(cluster=east)

    lines = scrape()

    assert 'mlsched_nodes_quarantined{cluster="east"} 1' in lines
    assert 'mlsched_nodes_quarantined{cluster="west"} 0' in lines


def test_it_says_what_each_priority_class_holds_and_its_gpu_limits(scrape):
    NodeFactory(gpu_count=8)
    urgent = PriorityClassFactory(name="urgent", value=100, max_gpus=8)
    JobFactory(gpus=3, priority_class=urgent)
    PriorityClassFactory(name="low", value=-10, max_gpus_per_user=2)
    cycle.run_cycle()

    lines = scrape()

    assert 'mlsched_class_gpus{class="urgent"} 3' in lines
    assert 'mlsched_class_gpus{class="low"} 0' in lines
    assert 'mlsched_class_gpu_limit{class="urgent",limit="max_gpus"} 8' in lines
    assert 'mlsched_class_gpu_limit{class="low",limit="max_gpus_per_user"} 2' in lines
    assert 'mlsched_class_gpu_limit{class="urgent",limit="max_gpus_per_user"}' not in "".join(lines)


def test_gpus_in_maintenance_are_counted_apart_not_as_idle(scrape):
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east, gpu_count=8)
    shut = NodeFactory(cluster=east, gpu_count=4)
    soon = NodeFactory(cluster=east, gpu_count=2)
    now = timezone.now()
    begun = MaintenanceWindow.objects.create(
        cluster=east, starts_at=now - timedelta(hours=1), ends_at=now + timedelta(hours=1)
    )
    begun.nodes.set([shut])
    later = MaintenanceWindow.objects.create(
        cluster=east, starts_at=now + timedelta(hours=1), ends_at=now + timedelta(hours=2)
    )
    later.nodes.set([soon])

    lines = scrape()

    assert 'mlsched_gpus_in_maintenance{cluster="east",gpu_type="A100"} 4' in lines
    assert 'mlsched_gpus_idle{cluster="east",gpu_type="A100",kind="whole"} 10' in lines


@pytest.mark.parametrize(
    "waiting_gpus, fragmented",
    [(2, "1"), (1, "0.5")],
    ids=["a 2-GPU job cannot use the last free GPU", "half the mix can"],
)
def test_it_reports_the_idle_gpus_the_job_mix_could_not_use(scrape, waiting_gpus, fragmented):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    JobFactory(gpus=7)
    cycle.run_cycle()
    JobFactory(gpus=waiting_gpus)  # queued after the cycle: with the 7-GPU worker, the mix

    lines = scrape()

    assert f'mlsched_gpus_fragmented{{cluster="east",gpu_type="A100"}} {fragmented}' in lines


def test_it_reports_queue_wait_and_preemption_rate(scrape):
    NodeFactory(gpu_count=8)
    job = JobFactory(gpus=1, created=timezone.now() - timedelta(seconds=30))
    cycle.run_cycle()
    job.refresh_from_db()
    actions.transition(job, State.RUNNING, "started")
    attempt = job.attempts.get()
    Attempt.objects.filter(pk=attempt.pk).update(started_at=timezone.now())
    actions.preempt({JobFactory(gpus=8).pk: [job.pk]})
    actions.end_attempt(attempt.pk, Attempt.Outcome.PREEMPTED)

    lines = scrape()

    wait = next(
        line
        for line in lines
        if line.startswith('mlsched_queue_wait_seconds{family="training",quantile="0.5"}')
    )
    assert 29 <= float(wait.split()[-1]) < 120
    tenant = f'mlsched_queue_wait_seconds_by_tenant{{tenant="{job.tenant.slug}",quantile="0.5"}}'
    assert any(line.startswith(tenant) for line in lines)
    assert "mlsched_preemption_rate 1" in lines
    assert 'mlsched_attempts_ended{outcome="preempted"} 1' in lines
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_the_preemption_rate_counts_the_schedulers_preemptions_not_requeues_drains_or_windows(
    scrape,
):
    east = ClusterFactory(name="east")
    nodes = [NodeFactory(cluster=east, gpu_count=8) for _ in range(4)]
    preempted, requeued, drained, maintained = [JobFactory(gpus=8) for _ in range(4)]
    cycle.run_cycle()
    now = timezone.now()
    Attempt.objects.update(started_at=now)
    urgent = JobFactory(gpus=8)
    actions.preempt({urgent.pk: [preempted.pk]})
    actions.requeue(requeued, "alice")
    node_of = {a.job_id: a.allocations.first().node_id for a in Attempt.objects.all()}
    actions.drain([node_of[drained.pk]], "admin")
    window = MaintenanceWindow.objects.create(
        cluster=east, starts_at=now - timedelta(minutes=1), ends_at=now + timedelta(hours=1)
    )
    window.nodes.set([node_of[maintained.pk]])
    janitor.stop_for_maintenance(now)
    for attempt in Attempt.objects.all():  # their agents end them as asked
        actions.end_attempt(attempt.pk, attempt.stop_reason)

    lines = scrape()

    assert len(nodes) == 4 and 'mlsched_attempts_ended{outcome="preempted"} 4' in lines
    assert "mlsched_preemption_rate 0.25" in lines
    for cause, n in [("preemption", 1), ("requeue", 1), ("drain", 1), ("maintenance", 1),
                     ("booking", 0)]:  # fmt: skip
        assert f'mlsched_attempts_stopped{{cause="{cause}"}} {n}' in lines
    assert set(Attempt.objects.values_list("stop_cause", flat=True)) == {
        "preemption",
        "requeue",
        "drain",
        "maintenance",
    }


def queue_wait_quantiles(*waits: float) -> dict:
    """/metrics' queue-wait figures for jobs that started `waits` seconds after submission."""
    now = timezone.now()
    for wait in waits:
        job = JobFactory()
        Job.objects.filter(pk=job.pk).update(
            created=now - timedelta(seconds=100), started_at=now - timedelta(seconds=100 - wait)
        )
    by_family, _ = metrics.queue_wait(now, Job.objects.all())
    return {labels["quantile"]: value for labels, value in by_family.samples}


@pytest.mark.parametrize(
    ("waits", "want"),
    [
        ((10, 20), {0.5: 15, 0.95: 19.5, 0.99: 19.9, "mean": 15}),
        (range(1, 21), {0.5: 10.5, 0.95: 19.05, 0.99: 19.81, "mean": 10.5}),
        ((7,), {0.5: 7, 0.95: 7, 0.99: 7, "mean": 7}),
    ],
    ids=["the median of two is their midpoint", "the p95 of twenty is below the maximum", "one"],
)
def test_queue_wait_quantiles_are_interpolated_between_the_nearest_waits(waits, want):
    assert queue_wait_quantiles(*waits) == pytest.approx(want)


def finish(outcome, retries_left=0):
    """A job whose only attempt ends with ``outcome``; with no retries left, it fails on an
    infrastructure failure too."""
    NodeFactory(gpu_count=8)
    job = JobFactory(gpus=1, max_retries=retries_left)
    cycle.run_cycle()
    actions.end_attempt(job.attempts.get().pk, outcome)
    return Job.objects.get(pk=job.pk)


def test_it_splits_failed_jobs_into_code_and_infrastructure_failures_for_the_success_rate(scrape):
    ended = Attempt.Outcome
    outcomes = [ended.SUCCEEDED] * 3 + [ended.USER_ERROR, ended.TIMEOUT, ended.LOST, ended.CANCELED]
    jobs = [finish(outcome) for outcome in outcomes]
    requeued = finish(Attempt.Outcome.INFRA_ERROR, retries_left=1)

    lines = scrape()

    assert [j.state for j in jobs[3:]] == ["failed", "failed", "failed", "canceled"]
    assert requeued.state == State.QUEUED  # not finished: not counted
    for outcome, n in [("succeeded", 3), ("user_error", 2), ("infra_error", 1), ("canceled", 1)]:
        assert f'mlsched_jobs_finished{{outcome="{outcome}"}} {n}' in lines
    assert "mlsched_job_success_rate 0.5" in lines


def test_a_day_with_no_job_finished_has_no_success_rate_rather_than_zero(scrape):
    finish(Attempt.Outcome.CANCELED)  # canceled: neither a success nor a failure

    lines = scrape()

    assert not [line for line in lines if line.startswith("mlsched_job_success_rate ")]


def test_it_reports_heartbeat_ages(scrape):
    Cluster.objects.create(name="west", last_heartbeat=timezone.now() - timedelta(seconds=12))
    cycle.run_cycle()

    lines = scrape()

    age = next(line for line in lines if line.startswith("mlsched_agent_heartbeat_age_seconds{"))
    assert 12 <= float(age.split()[-1]) < 60
    assert any(line.startswith('mlsched_scheduler_last_cycle_age_seconds{shard="default"}')
               for line in lines)  # fmt: skip
    assert any(line.startswith('mlsched_scheduler_cycle_seconds{shard="default"}')
               for line in lines)  # fmt: skip


@pytest.fixture
def snapshot_loads(monkeypatch, settings):
    """The calls to the scheduler's snapshot load, each still made; caching on, 10 s."""
    settings.MLSCHED_METRICS_CACHE_S = 10
    return calls_to(monkeypatch, snapshot, "load")


def calls_to(monkeypatch, owner, name: str) -> list:
    """The calls to `owner.name` from now on, by their arguments, each still made."""
    calls = []
    function = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def total_gpus(figures) -> list:
    gpus = next(m for m in figures if m.name == "mlsched_gpus")
    return [value for labels, value in gpus.samples if labels["state"] == "total"]


def test_two_collects_within_the_period_load_the_snapshot_once(snapshot_loads):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    now = timezone.now()

    first = metrics.collect(now)
    NodeFactory(cluster=ClusterFactory(name="west"), gpu_count=4)
    second = metrics.collect(now + timedelta(seconds=9))

    assert len(snapshot_loads) == 1
    assert total_gpus(first) == total_gpus(second) == [8]


def test_the_platform_figures_are_computed_again_after_the_period(snapshot_loads):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    now = timezone.now()

    metrics.collect(now)
    NodeFactory(cluster=ClusterFactory(name="west"), gpu_count=4)
    later = metrics.collect(now + timedelta(seconds=10))

    assert len(snapshot_loads) == 2
    assert sorted(total_gpus(later)) == [4, 8]


def test_a_period_of_zero_computes_them_at_every_collect(snapshot_loads, settings):
    settings.MLSCHED_METRICS_CACHE_S = 0
    now = timezone.now()

    metrics.collect(now)
    NodeFactory(gpu_count=8)
    second = metrics.collect(now)

    assert len(snapshot_loads) == 2
    assert total_gpus(second) == [8]


def test_the_job_figures_are_current_at_every_collect(snapshot_loads):
    now = timezone.now()

    metrics.collect(now)
    JobFactory()
    jobs = next(m for m in metrics.collect(now) if m.name == "mlsched_jobs")

    assert jobs.samples == [({"state": "queued"}, 1)]


def test_the_metrics_keep_their_order_whether_computed_or_cached(snapshot_loads):
    now = timezone.now()

    computed = [m.name for m in metrics.collect(now)]
    cached = [m.name for m in metrics.collect(now)]

    assert len(snapshot_loads) == 1
    assert computed == cached == ORDER


def jobs_section(html: str) -> str:
    start = html.index('id="mlsched_jobs"')
    return html[start : html.index("</section>", start)]


def test_overview_viewers_share_the_platform_figures_but_not_their_tenants_job_figures(
    client, snapshot_loads, alice, charlie, alpha, gamma
):
    JobFactory(tenant=alpha)
    for _ in range(3):
        JobFactory(tenant=gamma)
    pages = {}
    for user in (alice, charlie):
        client.force_login(user)
        pages[user.username] = client.get("/overview/").content.decode()

    assert len(snapshot_loads) == 1
    assert "<td>queued</td><td>1</td>" in jobs_section(pages["alice"])
    assert "<td>queued</td><td>3</td>" in jobs_section(pages["charlie"])


# Another web process: it reads the platform figures at `now`, its own snapshot load broken.
OTHER_PROCESS = """
import datetime, sys, django
django.setup()
from jobs import metrics, snapshot
def broken(*args, **kwargs):
    raise SystemExit("computed again")
snapshot.load = broken
now = datetime.datetime.fromisoformat(sys.argv[1])
gpus = next(m for m in metrics.platform(now).clusters if m.name == "mlsched_gpus")
print([value for labels, value in gpus.samples if labels["state"] == "total"])
"""


def test_every_web_process_reads_the_figures_one_of_them_computed(snapshot_loads):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    now = timezone.now()
    metrics.collect(now)

    other = subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, (now + timedelta(seconds=5)).isoformat()],
        cwd=ROOT, env=process_env(DJANGO_SETTINGS_MODULE="mlsched_site.settings"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert other.stdout.strip() == "[8]", other.stdout + other.stderr
    assert len(snapshot_loads) == 1


def test_without_redis_the_figures_are_computed_as_if_nothing_were_kept(
    snapshot_loads, monkeypatch
):
    from django.core.cache import caches
    from redis.exceptions import ConnectionError as RedisDown

    def down(*args, **kwargs):
        raise RedisDown("Connection refused")

    monkeypatch.setattr(caches["shared"], "get", down)
    monkeypatch.setattr(caches["shared"], "set", down)
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8)
    now = timezone.now()

    figures = [metrics.collect(now), metrics.collect(now)]

    assert [total_gpus(f) for f in figures] == [[8], [8]]
    assert len(snapshot_loads) == 2


def test_queued_jobs_are_counted_by_why_they_wait(snapshot_loads):
    for reason in ("quota_exceeded", "quota_exceeded", "user_gpu_limit"):
        JobFactory(pending_reason=reason)
    JobFactory(state=State.RUNNING, pending_reason="")

    got = next(
        m for m in metrics.collect(timezone.now()) if m.name == "mlsched_jobs_queued_by_reason"
    )

    assert got.samples == [({"reason": "quota_exceeded"}, 2), ({"reason": "user_gpu_limit"}, 1)]


def test_the_gpus_queued_jobs_ask_for_are_summed_by_why_they_wait(snapshot_loads):
    JobFactory(pending_reason="insufficient_gpus", workers=4, gpus=8)
    JobFactory(pending_reason="insufficient_gpus", gpus=0, gpu_milli=250)
    JobFactory(pending_reason="quota_exceeded", gpus=2)
    JobFactory(pending_reason="deferred", gpus=0, gpu_milli=0)  # a CPU job
    JobFactory(state=State.RUNNING, pending_reason="", gpus=8)

    got = next(
        m for m in metrics.collect(timezone.now()) if m.name == "mlsched_gpus_queued_by_reason"
    )

    assert got.samples == [({"reason": "deferred"}, 0.0), ({"reason": "insufficient_gpus"}, 32.25),
                           ({"reason": "quota_exceeded"}, 2.0)]  # fmt: skip


def test_attempts_stopped_before_the_cause_was_stored_have_it_read_off_their_stop_message():
    name_stop_causes = import_module("jobs.migrations.0029_attempt_stop_cause").name_stop_causes
    messages = {
        "preempted for a higher-priority job": "preemption",
        "requeued by alice, held": "requeue",
        "node drained by admin; requeued to run elsewhere": "drain",
        "maintenance of east from 2026-12-03T10:00:00Z to 2026-12-03T12:00:00Z; requeued":
            "maintenance",
        "nodes of east booked for another team from 2026-12-03T10:00:00Z to "
        "2026-12-03T12:00:00Z; requeued": "booking",
    }  # fmt: skip
    stopped = {
        JobFactory().attempts.create(number=1, outcome="preempted", reason=message).pk: cause
        for message, cause in messages.items()
    }
    live = JobFactory().attempts.create(number=1, stop_reason="preempted", reason="requeued by b")
    failed = JobFactory().attempts.create(number=1, outcome="user_error", reason="exit code 1")

    name_stop_causes(apps, None)

    causes = dict(Attempt.objects.values_list("pk", "stop_cause"))
    assert {pk: causes[pk] for pk in stopped} == stopped
    assert causes[live.pk] == "requeue" and causes[failed.pk] == ""


def test_it_reports_the_cpu_efficiency_and_unused_memory_of_measured_attempts(scrape):
    now = timezone.now()
    # Ended in the last day, measured: 2 workers x 4 cores for 1 h asked, 2 core-hours busy;
    # 16,000 MiB asked per worker, 4,000 reached.
    measured = JobFactory(workers=2, cpu_milli=4000, memory_mb=16_000)
    AttemptFactory(job=measured, started_at=now - 2 * HOUR, worker_ran_at=now - 2 * HOUR,
                   ended_at=now - HOUR, outcome="succeeded", cpu_seconds=2 * 3600,
                   memory_peak_mb=4000)  # fmt: skip
    # Not counted: not measured, or ended two days ago.
    AttemptFactory(job=JobFactory(), started_at=now - 2 * HOUR, ended_at=now - HOUR,
                   outcome="succeeded")  # fmt: skip
    AttemptFactory(job=JobFactory(), started_at=now - 50 * HOUR, ended_at=now - 49 * HOUR,
                   outcome="succeeded", cpu_seconds=1.0, memory_peak_mb=1)  # fmt: skip

    lines = scrape()

    assert "mlsched_cpu_efficiency 0.25" in lines
    # The two that succeeded in the last day ran an hour each of their hour's limit.
    assert "mlsched_runtime_efficiency 1" in lines
    unused = next(line for line in lines if line.startswith("mlsched_memory_unused_gib_hours "))
    assert float(unused.split()[-1]) == pytest.approx(12_000 * 2 / 1024)


def test_it_counts_the_gpus_held_by_running_attempts_idle_for_ten_minutes_or_more(scrape):
    now = timezone.now()
    idle = JobFactory(workers=2, gpus=4, state=State.RUNNING)
    AttemptFactory(job=idle, started_at=now - HOUR, gpu_idle_since=now - timedelta(minutes=20))
    # Not counted: idle for five minutes, busy, or ended.
    for since in (now - timedelta(minutes=5), None):
        AttemptFactory(job=JobFactory(gpus=8, state=State.RUNNING), started_at=now - HOUR,
                       gpu_idle_since=since)  # fmt: skip
    AttemptFactory(job=JobFactory(gpus=8), started_at=now - 2 * HOUR, ended_at=now - HOUR,
                   outcome="succeeded", gpu_idle_since=now - HOUR)  # fmt: skip

    assert "mlsched_gpus_held_idle 8" in scrape()


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (8, "8"),
        (8.0, "8"),
        (12_345_678, "12345678"),
        (1_234_567.25, "1234567.25"),
        (0.1 + 0.2, "0.30000000000000004"),
        (2.0**60, "1.152921504606847e+18"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (-float("inf"), "-Inf"),
    ],
)
def test_a_sample_is_written_as_its_value_reads_back(value, written):
    metric = metrics.Metric("m", "gauge", "M.", [({}, value)])

    assert metric.lines()[-1] == f"m {written}"
    if written[-1].isdigit():
        assert float(written) == float(value)


def test_right_sizing_gives_no_sample_while_nothing_was_measured(scrape):
    now = timezone.now()
    # Ended in the last day, its use never measured (a virtual inventory's GPUs, say).
    AttemptFactory(job=JobFactory(gpus=1), started_at=now - 2 * HOUR, ended_at=now - HOUR,
                   outcome="failed")  # fmt: skip

    lines = scrape()

    for name in ("mlsched_cpu_efficiency", "mlsched_gpu_efficiency", "mlsched_runtime_efficiency"):
        assert f"# TYPE {name} gauge" in lines
        assert not [line for line in lines if line.startswith(f"{name} ")]


def test_it_counts_each_clusters_nodes_by_state_every_state_given(scrape):
    east = ClusterFactory(name="east", health="healthy")
    NodeFactory(cluster=east, name="ready")
    NodeFactory(cluster=east, name="lost", healthy=False)
    NodeFactory(cluster=east, name="cordoned", schedulable=False)

    lines = scrape()

    assert 'mlsched_nodes{cluster="east",state="down"} 1' in lines
    assert 'mlsched_nodes{cluster="east",state="drained"} 1' in lines
    assert 'mlsched_nodes{cluster="east",state="idle"} 1' in lines
    assert 'mlsched_nodes{cluster="east",state="maintenance"} 0' in lines
