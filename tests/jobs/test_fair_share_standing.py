"""A team's fair share and its turn among the teams waiting (Slurm's sshare), as the cycle's
line records them: on a waiting job's standing, the queue's API, page and CLI."""

import json

import pytest
from django.utils import timezone
from django.utils.html import escape

from jobs import cycle, standing
from jobs.cli.describe import in_line
from jobs.placement.ordering import TeamShare
from quotas.models import RecentUse
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory, TenantFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_queue_line import api

pytestmark = pytest.mark.django_db

ALPHAS = (
    "Alpha's fair share: 0.25 (it holds 50 % of the platform's GPUs, for a fair-share weight "
    "of 2); its turn comes 1st of the 2 teams with jobs waiting (the lowest share goes first, "
    "less its aging for how long its next job has waited)."
)


@pytest.fixture
def shares(alpha, gamma, alice, charlie, east, settings):
    """One 8-GPU node. Alpha (weight 2) holds 4 of its GPUs; Gamma holds none but used 4 on
    average recently: Alpha's share is 4/8 / 2, Gamma's 4/8 / 1. Each has an 8-GPU job waiting."""
    settings.MLSCHED_LINE_EVERY_S = 0  # each cycle keeps its line
    alpha.fair_share_weight = 2
    alpha.save()
    RecentUse.objects.create(tenant=gamma, use={"gpu": 4000.0}, at=timezone.now())
    normal = PriorityClassFactory(name="normal", value=0)
    NodeFactory(cluster=east, gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, priority_class=normal, gpus=4)
    cycle.run_cycle()
    waiting = {
        "alpha": JobFactory(tenant=alpha, owner=alice, priority_class=normal, gpus=8),
        "gamma": JobFactory(tenant=gamma, owner=charlie, priority_class=normal, gpus=8),
    }
    cycle.run_cycle()
    for job in waiting.values():
        job.refresh_from_db()
    return waiting


def test_a_teams_share_is_its_dominant_fraction_held_and_used_recently_over_its_weight(shares):
    ours, theirs = standing.of(shares["alpha"]), standing.of(shares["gamma"])

    assert ours.turn == standing.Turn(TeamShare(0.25, "gpu", 0.5, 0.0, 1.0, 2.0), 1, 2)
    assert theirs.turn.share == TeamShare(0.5, "gpu", 0.0, 0.5, 1.0, 1.0)
    assert (theirs.turn.turn, theirs.turn.teams) == (2, 2)
    # The lower share's turn came first: Alpha's job is ahead, though Gamma holds nothing.
    assert (ours.position, theirs.position) == (1, 2)
    assert standing.share_sentence(ours.turn, "Alpha") == ALPHAS


def test_the_job_document_and_status_say_its_teams_share(shares, alice):
    document = api(alice).get(f"/api/v1/jobs/{shares['alpha'].pk}/").json()

    share = document["standing"]["team_share"]
    assert (share["share"], share["held"], share["weight"]) == (0.25, 0.5, 2.0)
    assert (share["turn"], share["teams"]) == (1, 2)
    assert share["sentence"] == ALPHAS.replace("Alpha's", "Its team's")
    assert share["sentence"] in in_line(document)


def test_the_queue_gives_the_callers_teams_shares_alone(shares, alice, charlie):
    ours = api(alice).get("/api/v1/queue/").json()["fair_share"]
    theirs = api(charlie).get("/api/v1/queue/").json()["fair_share"]

    assert list(ours) == ["alpha"] and ours["alpha"]["sentence"] == ALPHAS
    assert list(theirs) == ["gamma"]
    assert theirs["gamma"]["recent"] == 0.5
    assert theirs["gamma"]["sentence"].startswith(
        "Gamma's fair share: 0.5 (it holds 0 % of the platform's GPUs, and counts 50 % more "
        "for its recent use, for a fair-share weight of 1); its turn comes 2nd of the 2 teams"
    )


def test_the_queue_page_and_the_cli_say_the_teams_share(shares, alice, client, cli):  # noqa: F811
    client.force_login(alice)
    page = client.get("/queue/").content.decode()
    printed = cli("queue").stdout.splitlines()

    assert f'<p class="fair-share">{escape(ALPHAS)}</p>' in page
    assert "Gamma" not in page
    assert printed[1] == ALPHAS


def test_a_team_alone_in_line_is_said_to_be(alpha, alice):
    JobFactory(tenant=alpha, owner=alice, gpus=8)  # no node holds it
    cycle.run_cycle()

    said = api(alice).get("/api/v1/queue/").json()["fair_share"]["alpha"]["sentence"]

    assert said == (
        "Alpha's fair share: 0 (it holds nothing and has used nothing recently); no other team "
        "has jobs waiting (the lowest share goes first, less its aging for how long its next "
        "job has waited)."
    )


@pytest.mark.parametrize(
    "share, said",
    [
        (
            TeamShare(0.125, "cpu", 0.4, 0.1, 0.25, 1.0),
            "it holds 40 % of the platform's CPU (a resource counted at 0.25), and counts 10 % "
            "more for its recent use, for a fair-share weight of 1",
        ),
        (
            TeamShare(1 / 3, "memory", 1 / 3, 0.0, 1.0, 1.5),
            "it holds 33.3 % of the platform's memory, for a fair-share weight of 1.5",
        ),
    ],
)
def test_the_sentence_names_the_dominant_resource_and_its_weight(share, said):
    sentence = standing.share_sentence(standing.Turn(share, 3, 3))

    assert f"({said}); its turn comes 3rd of the 3 teams" in sentence


def test_a_line_recorded_before_shares_were_reads_without_them(shares, alice):
    from django.core.cache import caches

    kept = caches["shared"].get(standing.KEY)
    del kept["shares"]
    kept["stamp"] = "older"
    caches["shared"].set(standing.KEY, kept)
    caches["shared"].set(standing.STAMP, "older")

    document = api(alice).get(f"/api/v1/jobs/{shares['alpha'].pk}/").json()

    assert document["standing"]["position"] == 1
    assert document["standing"]["team_share"] is None
    assert json.dumps(api(alice).get("/api/v1/queue/").json()["fair_share"]) == "{}"


def test_the_quotas_api_page_and_cli_say_each_teams_share_too(shares, alice, client, cli):  # noqa: F811
    teams = api(alice).get("/api/v1/quotas/").json()["tenants"]
    client.force_login(alice)
    page = client.get("/quotas/").content.decode()
    printed = cli("quota").stdout

    assert [team["fair_share"]["sentence"] for team in teams] == [ALPHAS]
    assert f'<span class="fair-share">{escape(ALPHAS)}</span>' in page
    assert f"  {ALPHAS}\n" in printed


def test_the_tenant_admin_lists_each_teams_share_and_turn(shares, admin_client, alpha):
    listed = admin_client.get("/admin/quotas/tenant/").content.decode()
    page = admin_client.get(f"/admin/quotas/tenant/{alpha.pk}/change/").content.decode()

    assert '<td class="field-fair_share_now">0.25 (1st of 2 teams waiting)</td>' in listed
    assert '<td class="field-fair_share_now">0.5 (2nd of 2 teams waiting)</td>' in listed
    assert "0.25 (1st of 2 teams waiting)" in page


def test_a_recent_use_under_a_twentieth_of_a_percent_is_not_said():
    share = TeamShare(0.8, "gpu", 0.8, 0.0004, 1.0, 1.0)

    sentence = standing.share_sentence(standing.Turn(share, 1, 1))

    assert "(it holds 80 % of the platform's GPUs, for a fair-share weight of 1)" in sentence


def test_the_tenant_list_reads_the_line_once_for_its_page(shares, admin_client, monkeypatch):
    for n in range(5):
        TenantFactory(slug=f"idle-{n}")
    reads = []
    read = standing.Line.read.__func__

    def counted(cls):
        reads.append(1)
        return read(cls)

    monkeypatch.setattr(standing.Line, "read", classmethod(counted))

    listed = admin_client.get("/admin/quotas/tenant/").content.decode()

    assert listed.count('<td class="field-fair_share_now">-</td>') == 5
    assert len(reads) == 1
