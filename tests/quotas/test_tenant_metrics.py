"""/metrics per tenant (Kueue's cluster-queue usage and quota figures): what each tenant's
running work holds by flavor, its quotas' limits and the GPUs it held recently, for the
tenants the reader may see; a team's member sees only its own on the overview."""

import pytest
from django.utils import timezone

from jobs import cycle
from quotas.models import RecentUse
from tests.factories import JobFactory, NodeFactory, QuotaFactory
from tests.jobs.test_overview import section

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(alpha, gamma, east):
    NodeFactory(cluster=east, name="east-0", gpu_type="A100", gpu_count=8)
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=4, borrow_limit=2, lend_limit=1)
    JobFactory(tenant=alpha, gpus=3, cpu_milli=6000, memory_mb=12_000)
    JobFactory(tenant=gamma, gpus=1, cpu_milli=1000, memory_mb=1000)
    cycle.run_cycle()
    # As the cycle keeps it (jobs.recent_use): 2.5 GPUs held recently.
    RecentUse.objects.update_or_create(
        tenant=alpha, defaults={"use": {"gpu": 2500.0}, "at": timezone.now()}
    )


def test_metrics_give_each_tenants_usage_limits_and_recent_gpus(running, scrape):
    lines = scrape()

    assert 'mlsched_tenant_usage{tenant="alpha",flavor="gpu:A100"} 3' in lines
    assert 'mlsched_tenant_usage{tenant="alpha",flavor="cpu"} 6000' in lines
    assert 'mlsched_tenant_usage{tenant="gamma",flavor="gpu:A100"} 1' in lines
    assert 'mlsched_tenant_quota{tenant="alpha",flavor="gpu:A100",limit="guaranteed"} 4' in lines
    assert 'mlsched_tenant_quota{tenant="alpha",flavor="gpu:A100",limit="borrow_limit"} 2' in lines
    assert 'mlsched_tenant_quota{tenant="alpha",flavor="gpu:A100",limit="lend_limit"} 1' in lines
    assert 'mlsched_tenant_recent_gpus{tenant="alpha"} 2.5' in lines


def test_a_member_sees_only_their_own_tenants_figures(running, client, alice):
    client.force_login(alice)

    usage = section(client.get("/overview/").content.decode(), "mlsched_tenant_usage")

    assert "<td>alpha</td>" in usage and "<td>gamma</td>" not in usage


def test_a_tenant_without_jobs_has_its_quota_figures_too(alpha, gamma, scrape):
    # A new team, or one whose jobs retention has deleted: its quota is still there.
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=4, borrow_limit=2)
    QuotaFactory(tenant=gamma, flavor="gpu:A100", guaranteed=1, borrow_limit=0)
    RecentUse.objects.create(tenant=gamma, use={"gpu": 500.0}, at=timezone.now())

    lines = scrape()

    assert 'mlsched_tenant_quota{tenant="alpha",flavor="gpu:A100",limit="guaranteed"} 4' in lines
    assert 'mlsched_tenant_quota{tenant="gamma",flavor="gpu:A100",limit="guaranteed"} 1' in lines
    assert 'mlsched_tenant_recent_gpus{tenant="gamma"} 0.5' in lines


def test_a_member_sees_their_tenants_quota_before_its_first_job(alpha, gamma, client, alice):
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=4, borrow_limit=2)
    QuotaFactory(tenant=gamma, flavor="gpu:A100", guaranteed=1, borrow_limit=0)
    client.force_login(alice)

    quota = section(client.get("/overview/").content.decode(), "mlsched_tenant_quota")

    assert "<td>alpha</td>" in quota and "<td>gamma</td>" not in quota


def test_a_figure_past_a_million_is_written_in_full_not_to_six_digits(alpha, scrape, client, alice):
    # 6 significant digits would write 1.23457e+06: a counter read so moves in steps.
    QuotaFactory(tenant=alpha, flavor="memory", guaranteed=1_234_567, borrow_limit=0)

    lines = scrape()
    client.force_login(alice)
    quota = section(client.get("/overview/").content.decode(), "mlsched_tenant_quota")

    assert (
        'mlsched_tenant_quota{tenant="alpha",flavor="memory",limit="guaranteed"} 1234567' in lines
    )
    assert "<td>1234567</td>" in quota
