"""What a team's quotas allow now (quotas.status), for its members: the API, the portal page,
who sees what. Running work is placed by the real cycle, under the quotas it reports on."""

import pytest
from rest_framework.test import APIClient

from jobs import cycle
from jobs.models import Job
from jobs.states import State
from quotas import status
from quotas.models import Membership, Tenant
from tests.factories import (
    JobFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    TenantFactory,
    UserFactory,
)
from tests.jobs import test_cli

pytestmark = pytest.mark.django_db

cli = test_cli.cli  # the command line against a live server, as Alice


@pytest.fixture
def placed(alpha, gamma, east):
    """alpha is guaranteed 8 A100s and may borrow 4 more; gamma, in the same cohort, is
    guaranteed 16 and borrows nothing. alpha runs 10 GPUs (2 borrowed from gamma's idle
    guarantee) and gamma 4, on four 8-GPU nodes; then alpha queues a 4-GPU job its quota
    cannot cover: 24 guaranteed, 14 used, and alpha may take 2 more."""
    for n in range(4):
        NodeFactory(cluster=east, name=f"east-{n}", gpu_type="A100", gpu_count=8)
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8, borrow_limit=4)
    QuotaFactory(tenant=gamma, flavor="gpu:A100", guaranteed=16, borrow_limit=0)
    for tenant, gpus in ((alpha, 8), (alpha, 2), (gamma, 4)):
        JobFactory(tenant=tenant, gpus=gpus)
    cycle.run_cycle()
    assert Job.objects.filter(state=State.SCHEDULED).count() == 3
    JobFactory(tenant=alpha, gpus=4)
    cycle.run_cycle()
    return Job.objects.get(state=State.QUEUED)


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def a100(team: dict) -> dict:
    (flavor,) = [f for f in team["flavors"] if f["flavor"] == "gpu:A100"]
    return flavor


def test_it_shows_a_team_what_it_may_still_start(alice, placed):
    (team,) = client_of(alice).get("/api/v1/quotas/").json()["tenants"]

    assert placed.pending_reason == "quota_exceeded"
    assert (team["slug"], team["queued_jobs"], team["waiting_for_quota"]) == ("alpha", 1, 1)
    assert team["max_queued_jobs"] is None
    assert a100(team) == {
        "flavor": "gpu:A100", "unit": "GPUs", "guaranteed": 8, "borrow_limit": 4,
        "lend_limit": None, "in_use": 10, "borrowed": 2, "may_start": 2,
    }  # fmt: skip


def test_its_guarantee_counts_whole_while_others_borrow_it(charlie, placed):
    (team,) = client_of(charlie).get("/api/v1/quotas/").json()["tenants"]

    # 10 of the cohort's 24 are idle, yet gamma may start its 12 unused: it reclaims them.
    assert (a100(team)["in_use"], a100(team)["borrowed"], a100(team)["may_start"]) == (4, 0, 12)


def test_a_flavor_nobody_in_the_cohort_limits_is_listed_unlimited(alice, placed):
    (team,) = client_of(alice).get("/api/v1/quotas/").json()["tenants"]

    cpu = next(f for f in team["flavors"] if f["flavor"] == "cpu")
    assert cpu["in_use"] == 2 * 4000 and cpu["unit"] == "millicores"
    assert (cpu["guaranteed"], cpu["borrow_limit"], cpu["may_start"]) == (None, None, None)


def test_a_team_without_a_quota_of_its_own_borrows_what_its_cohort_leaves_idle(
    alice, alpha, gamma, east
):
    NodeFactory(cluster=east, name="east-0", gpu_type="A100", gpu_count=8)
    QuotaFactory(tenant=gamma, flavor="gpu:A100", guaranteed=6)

    (team,) = client_of(alice).get("/api/v1/quotas/").json()["tenants"]

    assert a100(team) | {"flavor": ""} == {
        "flavor": "", "unit": "GPUs", "guaranteed": 0, "borrow_limit": None, "lend_limit": None,
        "in_use": 0, "borrowed": 0, "may_start": 6,
    }  # fmt: skip


def test_members_see_their_own_teams_only_and_a_platform_admin_every_team(alice, charlie, placed):
    viewer = UserFactory(username="vera")
    MembershipFactory(user=viewer, tenant=placed.tenant, role=Membership.Role.VIEWER)
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)

    def slugs(user, query=""):
        return [t["slug"] for t in client_of(user).get(f"/api/v1/quotas/{query}").json()["tenants"]]

    assert slugs(alice) == ["alpha"] and slugs(charlie) == ["gamma"] and slugs(viewer) == ["alpha"]
    assert slugs(admin) == ["alpha", "gamma"]
    assert slugs(admin, "?tenant=gamma") == ["gamma"]
    refused = client_of(alice).get("/api/v1/quotas/?tenant=gamma")
    assert refused.status_code == 400
    assert refused.json() == {"tenant": ["None of your tenants has this slug."]}
    assert APIClient().get("/api/v1/quotas/").status_code in (401, 403)


def test_the_portal_page_draws_the_same_figures(client, alice, placed):
    client.force_login(alice)

    page = client.get("/quotas/").content.decode()

    row = page[page.index('data-flavor="gpu:A100"') :].split("</tr>")[0]
    cells = [cell.split("</td>")[0] for cell in row.split("<td")[1:]]
    shown = [c.split(">", 1)[1] for c in cells]
    assert shown == ["gpu:A100", "GPUs", "8", "4", "all of its guarantee", "10", "2", "2"]
    assert "1 job queued, 1 waiting for quota." in page
    assert 'id="team-alpha"' in page and 'id="team-gamma"' not in page


def test_the_portal_page_gives_cpu_in_cores_and_memory_in_gib(client, alice, alpha, placed):
    QuotaFactory(tenant=alpha, flavor="cpu", guaranteed=64_000)
    QuotaFactory(tenant=alpha, flavor="memory", guaranteed=524_288, borrow_limit=1536)
    client.force_login(alice)

    page = client.get("/quotas/").content.decode()

    def shown(flavor: str) -> list[str]:
        row = page[page.index(f'data-flavor="{flavor}"') :].split("</tr>")[0]
        return [cell.split("</td>")[0].split(">", 1)[1] for cell in row.split("<td")[1:]]

    assert shown("cpu")[:3] == ["cpu", "cores", "64"] and shown("cpu")[5] == "8"
    assert shown("memory")[:4] == ["memory", "GiB", "512", "1.50"]


def test_the_portal_page_asks_to_log_in(client):
    assert client.get("/quotas/").status_code == 302


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_each_flavor_and_the_jobs_waiting_for_quota(cli, placed):
    done = cli("quota")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["tenant", "flavor", "unit", "guaranteed", "borrow", "limit", "lend",
                                "limit", "in", "use", "borrowed", "may", "start"]  # fmt: skip
    assert ["alpha", "gpu:A100", "GPUs", "8", "4", "all", "10", "2", "2"] in [
        line.split() for line in lines
    ]
    assert ["alpha", "cpu", "millicores", "-", "-", "-", "8000", "0", "no", "limit"] in [
        line.split() for line in lines
    ]
    assert lines[-1] == "alpha: 1 queued, 1 waiting for quota, 0 GPUs held recently (fair share)"


def test_queries_do_not_grow_with_the_teams(django_assert_max_num_queries, placed):
    for n in range(5):
        QuotaFactory(tenant=TenantFactory(name=f"team {n}", slug=f"team-{n}"))
    every = list(Tenant.objects.order_by("name"))
    with django_assert_max_num_queries(5):
        teams = status.of(every)
    assert len(teams) == 7


def test_it_shows_how_many_jobs_the_team_may_have_queued(client, alice, alpha, placed):
    Tenant.objects.filter(pk=alpha.pk).update(max_queued_jobs=50)
    client.force_login(alice)

    (team,) = client_of(alice).get("/api/v1/quotas/").json()["tenants"]
    page = client.get("/quotas/")

    assert (team["queued_jobs"], team["max_queued_jobs"]) == (1, 50)
    assert "1 job queued of at most 50" in page.text
