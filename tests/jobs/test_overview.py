"""The portal's overview: the /metrics figures drawn, the job figures of the user's tenants."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.states import State
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(client, alice):
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
