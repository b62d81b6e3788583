"""The overview's panels: the metrics pivoted into a table per thing an operator reads first
(a cluster's GPUs, the queue, a team, the last day, the control plane), every metric in full
below them, folded away."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import cycle, overview
from jobs.metrics import Metric
from jobs.models import SchedulerShard
from tests.factories import ClusterFactory, JobFactory, NodeFactory, QuotaFactory
from tests.jobs.test_overview import section


def figures(**samples) -> list[Metric]:
    """Metrics named by the keywords (`mlsched_` left off), each with its samples."""
    return [Metric(f"mlsched_{name}", "gauge", "", list(s)) for name, s in samples.items()]


def test_capacity_gives_each_clusters_gpu_type_its_allocated_and_idle_gpus_by_usability():
    east = {"cluster": "east", "gpu_type": "A100"}
    west = {"cluster": "west", "gpu_type": "T4"}

    rows = overview.capacity(figures(
        gpus=[({**east, "state": "total"}, 16), ({**east, "state": "allocated"}, 12),
              ({**west, "state": "total"}, 4), ({**west, "state": "allocated"}, 0.5)],
        gpus_idle=[({**east, "kind": "whole"}, 3), ({**west, "kind": "sliver"}, 0.5)],
        gpus_largest_free_block=[(east, 2)],
        gpus_fragmented=[(east, 1)],
        gpus_in_maintenance=[(west, 3)],
        gpus_booked_idle=[(east, 1)],
    ))  # fmt: skip

    assert rows == [
        overview.Capacity("east", "A100", 16, 12, 3, 0, 2, 1, 0, 1),
        overview.Capacity("west", "T4", 4, 0.5, 0, 0.5, 0, 0, 3, 0),
    ]
    assert [row.percent for row in rows] == [75, 12]


def test_the_queue_lists_why_jobs_wait_the_most_jobs_first_each_with_its_meaning():
    rows = overview.waiting(figures(jobs_queued_by_reason=[
        ({"reason": "held"}, 2), ({"reason": "quota_exceeded"}, 5),
        ({"reason": "insufficient_gpus"}, 0), ({"reason": "something_new"}, 1),
    ]))  # fmt: skip

    assert [(r.code, r.jobs) for r in rows] == [("quota_exceeded", 5), ("held", 2),
                                                 ("something_new", 1)]  # fmt: skip
    assert rows[0].meaning.startswith("The tenant's guarantee plus what it may borrow")
    assert rows[1].meaning.startswith("Held:")
    assert rows[2].meaning == ""


def test_queue_waits_are_written_as_durations_per_family():
    samples = [({"family": "training", "quantile": q}, s)
               for q, s in ((0.5, 30), (0.95, 600), (0.99, 7200), ("mean", 60))]  # fmt: skip

    rows = overview.waits(figures(queue_wait_seconds=samples), "mlsched_queue_wait_seconds",
                          "family")  # fmt: skip

    assert rows == [overview.Wait("training", "30 s", "10 min", "2 h", "60 s")]


def test_queue_waits_call_each_family_by_its_name_where_one_is_given():
    samples = [({"family": family, "quantile": 0.5}, 30) for family in ("batch_inference", "new")]

    rows = overview.waits(figures(queue_wait_seconds=samples), "mlsched_queue_wait_seconds",
                          "family", {"batch_inference": "Batch inference"})  # fmt: skip

    assert [row.of for row in rows] == ["Batch inference", "new"]


def test_the_glance_gives_gpus_whole_or_to_two_decimals():
    shown = {g.title: g.figure for g in overview.glance(figures(
        gpus=[({"cluster": "east", "gpu_type": "T4", "state": "total"}, 20),
              ({"cluster": "east", "gpu_type": "T4", "state": "allocated"}, 2.5)],
        gpus_fragmented=[({"cluster": "east", "gpu_type": "T4"}, 2 / 7)],
        gpus_held_idle=[({"cluster": "east", "gpu_type": "T4"}, 0.999)],
    ))}  # fmt: skip

    assert shown["GPUs allocated"] == "2.5 of 20"
    assert shown["Idle but unusable"] == "0.29 GPUs"
    assert shown["GPUs held idle"] == "1"


def test_a_teams_gpus_in_use_are_given_by_type_beside_its_quota_there():
    rows = overview.teams(figures(
        tenant_usage=[({"tenant": "alpha", "flavor": "gpu:A100"}, 6),
                      ({"tenant": "alpha", "flavor": "cpu"}, 8000),
                      ({"tenant": "alpha", "flavor": "gpu:T4"}, 1)],
        tenant_quota=[({"tenant": "alpha", "flavor": "gpu:A100", "limit": "guaranteed"}, 8),
                      ({"tenant": "alpha", "flavor": "gpu:A100", "limit": "borrow_limit"}, 4),
                      ({"tenant": "alpha", "flavor": "gpu:A100", "limit": "lend_limit"}, 2),
                      ({"tenant": "beta", "flavor": "gpu:A100", "limit": "guaranteed"}, 2)],
        tenant_recent_gpus=[({"tenant": "alpha"}, 5.5)],
        queue_wait_seconds_by_tenant=[({"tenant": "alpha", "quantile": 0.95}, 120)],
        gpu_budget_hours=[({"tenant": "beta"}, 1000)],
        gpu_budget_spent_hours=[({"tenant": "beta"}, 12.5)],
    ))  # fmt: skip

    alpha, beta = rows
    assert alpha == overview.Team("alpha", [overview.TeamGpus("A100", 6, 8, 4),
                                            overview.TeamGpus("T4", 1, None, None)],
                                  5.5, "2 min", "")  # fmt: skip
    assert beta == overview.Team("beta", [overview.TeamGpus("A100", 0, 2, None)], 0.0, "",
                                 "12.5 of 1000 GPU-hours")  # fmt: skip


def test_a_team_with_no_gpu_quota_or_use_is_listed_all_the_same():
    rows = overview.teams(figures(
        tenant_quota=[({"tenant": "cpu-team", "flavor": "cpu", "limit": "guaranteed"}, 8000)],
    ))  # fmt: skip

    assert rows == [overview.Team("cpu-team")]


def test_the_last_day_says_right_sizing_was_not_measured_when_its_figures_have_no_sample():
    facts = {f.title: f.text for f in overview.last_day(figures(
        jobs_finished=[({"outcome": "succeeded"}, 10), ({"outcome": "user_error"}, 1),
                       ({"outcome": "infra_error"}, 0), ({"outcome": "canceled"}, 2)],
        attempts_stopped=[({"cause": "preemption"}, 0), ({"cause": "drain"}, 3)],
        preemption_rate=[({}, 0.25)],
        cpu_efficiency=[({}, 0.456)],
        gpu_efficiency=[],
    ))}  # fmt: skip

    assert facts["Jobs finished"] == "10 succeeded, 1 failed by their own code, 2 canceled"
    assert facts["Stopped to be requeued"] == "3 drain"
    assert facts["Preemption rate"] == "25.0% of attempts started"
    sizing = facts["Right-sizing, attempts ended"]
    assert "CPU busy 46%" in sizing and "GPUs busy not measured" in sizing


def test_a_silent_agent_and_a_shard_without_a_recent_cycle_are_marked(settings):
    settings.MLSCHED_AGENT_TIMEOUT_S = 15

    shards, agents = overview.control(figures(
        scheduler_last_cycle_age_seconds=[({"shard": "default"}, 2), ({"shard": "b"}, 600)],
        scheduler_placements_total=[({"shard": "default"}, 12), ({"shard": "b"}, 0),
                                    ({"shard": "c"}, 0)],
        scheduler_cycle_seconds=[({"shard": "default"}, 0.25)],
        agent_heartbeat_age_seconds=[({"cluster": "east"}, 3), ({"cluster": "west"}, 120)],
    ))  # fmt: skip

    assert [(s.name, s.last_cycle, s.stalled) for s in shards] == [
        ("default", "2 s ago", False), ("b", "10 min ago", True), ("c", "", True)]  # fmt: skip
    assert shards[0].duration == "0.25 s" and shards[0].placements == "12"
    assert [(a.cluster, a.silent) for a in agents] == [("east", False), ("west", True)]


def test_an_agents_row_counts_its_clusters_nodes_down_of_all():
    _, agents = overview.control(figures(
        agent_heartbeat_age_seconds=[({"cluster": "east"}, 3)],
        nodes=[({"cluster": "east", "state": "down"}, 2), ({"cluster": "east", "state": "idle"}, 6),
               ({"cluster": "west", "state": "down"}, 1)],
    ))  # fmt: skip

    assert [(a.cluster, a.nodes_down, a.nodes) for a in agents] == [("east", 2, 8)]


@pytest.fixture
def page(client, alice, settings):
    settings.MLSCHED_METRICS_CACHE_S = 0
    client.force_login(alice)
    return lambda: client.get("/overview/").content.decode()


@pytest.mark.django_db
def test_the_page_draws_the_panels_first_and_every_metric_below_folded_away(page):
    html = page()

    details = html.index('<details id="every-metric">')
    for panel in ("capacity", "queue", "teams", "last-day", "control"):
        assert html.index(f'<section id="{panel}">') < details
    assert html.index('id="mlsched_gpus"') > details
    assert '<details id="every-metric" open' not in html


@pytest.mark.django_db
def test_the_pages_panels_read_the_clusters_the_queue_and_the_users_team(page, alpha):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8, gpu_type="A100")
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=4)
    JobFactory(tenant=alpha, gpus=2)
    JobFactory(tenant=alpha, gpus=8)  # over the team's quota
    SchedulerShard.objects.create(name="default", last_cycle_at=timezone.now())
    cycle.run_cycle()

    html = page()

    capacity = section(html, "capacity")
    assert "<td>east</td><td>A100</td>" in capacity and "2 of 8 (25 %)" in capacity
    assert "<td><code>quota_exceeded</code></td><td>1</td>" in section(html, "queue")
    teams = section(html, "teams")
    assert '<td rowspan="1">alpha</td>' in teams
    assert "<td>A100</td><td>2</td>\n        <td>4</td>" in teams
    control = section(html, "control")
    assert "<td>default</td>" in control and 'class="alarm"' not in control


@pytest.mark.django_db
def test_the_pages_control_panel_marks_a_scheduler_without_a_recent_cycle(page):
    SchedulerShard.objects.create(
        name="default", last_cycle_at=timezone.now() - timedelta(minutes=5)
    )

    assert '<tr class="alarm"><td>default</td><td>5 min ago</td>' in section(page(), "control")
