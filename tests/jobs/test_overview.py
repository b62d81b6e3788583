"""The portal's overview: the /metrics figures drawn, the job figures of the user's tenants."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.utils import timezone

from jobs import cycle
from jobs.models import SchedulerShard
from jobs.states import State
from tests.factories import AttemptFactory, ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(client, alice, settings):
    settings.MLSCHED_METRICS_CACHE_S = 0  # each view computes its figures afresh
    client.force_login(alice)
    return lambda: client.get("/overview/").content.decode()


def section(html: str, name: str) -> str:
    start = html.index(f'id="{name}"')
    return html[start : html.index("</section>", start)]


def test_it_draws_the_clusters_gpus_for_every_user(page):
    NodeFactory(gpu_count=8, gpu_type="A100")

    gpus = section(page(), "mlsched_gpus")

    assert "<td>A100</td><td>total</td><td>8</td>" in gpus


def test_its_job_figures_count_the_users_tenants_only(page, alpha, gamma):
    for _ in range(2):
        JobFactory(tenant=alpha)
    for _ in range(5):
        JobFactory(tenant=gamma)
    now = timezone.now()
    JobFactory(tenant=gamma, state=State.RUNNING, created=now - timedelta(hours=1),
               started_at=now)  # fmt: skip

    html = page()

    assert "<td>queued</td><td>2</td>" in section(html, "mlsched_jobs")
    assert "gamma" not in section(html, "mlsched_queue_wait_seconds_by_tenant")


def test_it_asks_anonymous_visitors_to_log_in(client):
    response = client.get("/overview/")

    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def glance(html: str) -> dict[str, tuple[str, bool]]:
    """The overview's first line: each title's figure, and whether it is marked for attention."""
    items = re.findall(
        r'<div class="glance-item( alarm)?">\s*<dt>([^<]*)</dt>\s*<dd class="figure">([^<]*)</dd>',
        html,
    )
    return {unescape(title): (unescape(figure), bool(alarm)) for alarm, title, figure in items}


def test_at_a_glance_it_gives_the_gpus_allocated_of_all_and_the_users_jobs(page, alpha):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_count=8, gpu_type="A100")
    JobFactory(tenant=alpha, gpus=2)
    JobFactory(tenant=alpha, gpus=8)  # waits: 6 GPUs are left
    cycle.run_cycle()

    figures = glance(page())

    assert figures["GPUs allocated"] == ("2 of 8", False)
    assert figures["Your teams' jobs"] == ("1 queued, 1 running", False)


def test_at_a_glance_a_scheduler_without_a_recent_cycle_is_marked(page):
    shard = SchedulerShard.objects.create(name="default", last_cycle_at=timezone.now())
    figure, marked = glance(page())["Scheduler"]
    # A second or more may pass before the page is drawn on a busy machine.
    assert re.fullmatch(r"last cycle \d s ago", figure) and not marked, figure

    SchedulerShard.objects.filter(pk=shard.pk).update(
        last_cycle_at=timezone.now() - timedelta(minutes=5)
    )

    assert glance(page())["Scheduler"] == ("last cycle 300 s ago", True)


def test_at_a_glance_quarantined_nodes_are_marked(page):
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east)
    assert glance(page())["Nodes quarantined"] == ("0", False)

    NodeFactory(cluster=east, quarantined_at=timezone.now(), schedulable=False)

    assert glance(page())["Nodes quarantined"] == ("1", True)


def test_at_a_glance_nodes_down_are_marked(page):
    east = ClusterFactory(name="east", last_heartbeat=timezone.now())
    NodeFactory(cluster=east)
    assert glance(page())["Nodes down"] == ("0", False)

    NodeFactory(cluster=east, healthy=False)

    assert glance(page())["Nodes down"] == ("1", True)


def test_at_a_glance_a_silent_agent_is_marked(page):
    now = timezone.now()
    ClusterFactory(name="east", last_heartbeat=now)
    ClusterFactory(name="west", last_heartbeat=now - timedelta(minutes=10))

    assert glance(page())["Agents"] == ("1 of 2 reporting", True)


def test_at_a_glance_gpus_running_jobs_hold_idle_are_marked(page, alpha):
    assert glance(page())["GPUs held idle"] == ("0", False)
    job = JobFactory(tenant=alpha, gpus=8, state=State.RUNNING)
    AttemptFactory(job=job, started_at=timezone.now() - timedelta(hours=1),
                   gpu_idle_since=timezone.now() - timedelta(minutes=20))  # fmt: skip

    assert glance(page())["GPUs held idle"] == ("8", True)
