"""GET /api/v1/queue/ and the CLI's `queue`: a user's teams' waiting jobs in the order the last
cycle left them, each with its place in line, in its team, and its priority points."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import actions, cycle
from jobs.models import Job
from tests.factories import JobFactory, MembershipFactory, PriorityClassFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def waiting(tenant, owner, minutes_ago=0, **kw):
    """A job of one 8-GPU worker (no node here holds it), submitted `minutes_ago`."""
    job = JobFactory(tenant=tenant, owner=owner, gpus=8, **kw)
    Job.objects.filter(pk=job.pk).update(created=timezone.now() - timedelta(minutes=minutes_ago))
    return job


@pytest.fixture
def line(alpha, gamma, alice, charlie):
    """Gamma's job first (it has waited longest), then Alice's two, the second her teammate's
    turn behind her first."""
    normal = PriorityClassFactory(name="normal", value=0)
    jobs = {
        "gamma": waiting(gamma, charlie, minutes_ago=60, priority_class=normal),
        "first": waiting(alpha, alice, minutes_ago=30, priority_class=normal, priority=5),
        "second": waiting(alpha, alice, minutes_ago=10, priority_class=normal),
    }
    cycle.run_cycle()
    return jobs


def test_it_lists_the_callers_teams_jobs_in_line_counting_every_teams(line, alice):
    answer = api(alice).get("/api/v1/queue/").json()

    assert answer["waiting"] == 3
    assert answer["teams"] == {"alpha": 2}
    assert [(j["id"], j["position"], j["in_team"]) for j in answer["jobs"]] == [
        (line["first"].pk, 2, 1),
        (line["second"].pk, 3, 2),
    ]
    assert answer["jobs"][0]["points"] > answer["jobs"][1]["points"]
    assert answer["jobs"][0]["tenant"] == "alpha"
    assert answer["jobs"][0]["owner"] == "alice"
    assert answer["next"] is None


def test_another_teams_member_sees_only_their_own(line, charlie):
    answer = api(charlie).get("/api/v1/queue/").json()

    assert [j["id"] for j in answer["jobs"]] == [line["gamma"].pk]
    assert answer["teams"] == {"gamma": 1}


def test_tenant_picks_one_of_the_callers_teams_and_another_finds_nothing(line, alice, gamma):
    MembershipFactory(tenant=gamma, user=alice)

    both = api(alice).get("/api/v1/queue/").json()
    one = api(alice).get("/api/v1/queue/", {"tenant": "gamma"}).json()

    assert [j["position"] for j in both["jobs"]] == [1, 2, 3]
    assert [j["id"] for j in one["jobs"]] == [line["gamma"].pk]


def test_a_full_page_says_where_the_next_one_starts(line, alice):
    first = api(alice).get("/api/v1/queue/", {"limit": 1}).json()
    rest = api(alice).get("/api/v1/queue/", {"limit": 1, "after": first["next"]}).json()

    assert [j["id"] for j in first["jobs"]] == [line["first"].pk]
    assert first["next"] == 2
    assert [j["id"] for j in rest["jobs"]] == [line["second"].pk]
    assert rest["next"] is None


@pytest.fixture
def teammates(alpha, alice, bob):
    """Alice's job first in line, then Bob's, then Alice's second."""
    normal = PriorityClassFactory(name="normal", value=0)
    jobs = [
        waiting(alpha, alice, minutes_ago=30, priority_class=normal, priority=9),
        waiting(alpha, bob, minutes_ago=20, priority_class=normal, priority=5),
        waiting(alpha, alice, minutes_ago=10, priority_class=normal),
    ]
    cycle.run_cycle()
    return jobs


def test_mine_lists_the_callers_own_jobs_at_their_places(teammates, alice, bob):
    hers = api(alice).get("/api/v1/queue/", {"mine": "1"}).json()
    his = api(bob).get("/api/v1/queue/", {"mine": "true"}).json()
    paged = api(alice).get("/api/v1/queue/", {"mine": "1", "limit": 1}).json()

    assert [(j["id"], j["position"], j["in_team"]) for j in hers["jobs"]] == [
        (teammates[0].pk, 1, 1),
        (teammates[2].pk, 3, 3),
    ]
    assert [j["id"] for j in his["jobs"]] == [teammates[1].pk]
    assert his["teams"] == {"alpha": 3}  # the team's count, every owner's
    assert paged["next"] == 1
    rest = api(alice).get("/api/v1/queue/", {"mine": "1", "after": 1}).json()
    assert [j["id"] for j in rest["jobs"]] == [teammates[2].pk]


def test_the_page_and_the_cli_keep_to_the_callers_own(teammates, bob, client, cli):  # noqa: F811
    client.force_login(bob)
    page = client.get("/queue/", {"mine": "1"}).content.decode()
    printed = cli("queue", "--mine").stdout.splitlines()

    assert f"<td>{teammates[1].pk}</td>" in page
    assert f"<td>{teammates[0].pk}</td>" not in page
    assert 'name="mine" value="1" checked' in page
    assert [row.split()[4] for row in printed[3:]] == [str(teammates[0].pk), str(teammates[2].pk)]


def test_a_job_canceled_since_the_cycle_is_left_out(line, alice):
    actions.cancel(line["first"], "canceled by alice")

    answer = api(alice).get("/api/v1/queue/").json()

    assert [(j["id"], j["position"]) for j in answer["jobs"]] == [(line["second"].pk, 3)]


@pytest.mark.parametrize(
    ("params", "field"),
    [({"limit": "0"}, "limit"), ({"limit": "1001"}, "limit"), ({"limit": "x"}, "limit"),
     ({"after": "-1"}, "after"), ({"after": "two"}, "after"), ({"mine": "maybe"}, "mine")],
)  # fmt: skip
def test_a_bad_parameter_is_a_400_naming_it(line, alice, params, field):
    response = api(alice).get("/api/v1/queue/", params)

    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_before_any_cycle_there_is_no_line(alice):
    answer = api(alice).get("/api/v1/queue/").json()

    assert answer == {
        "as_of": None,
        "waiting": 0,
        "teams": {},
        "fair_share": {},
        "jobs": [],
        "next": None,
    }


def test_an_anonymous_caller_is_refused(line):
    assert APIClient().get("/api/v1/queue/").status_code in (401, 403)


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_the_line_with_places_and_points(cli, line):  # noqa: F811
    done = cli("queue")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("line as of ")
    assert lines[0].endswith(" UTC: 3 waiting jobs; your teams': alpha 2")
    assert lines[1].startswith("Alpha's fair share: 0 (it holds nothing")
    assert lines[2].split() == ["tenant", "owner", "place", "in", "team", "id", "gpus", "waited",
                                "points", "class", "name", "why"]  # fmt: skip
    first = lines[3].split()
    assert first[:6] == ["alpha", "alice", "2", "1", str(line["first"].pk), "8"]
    assert first[6].startswith("3") and first[6].count(":") == 1  # about 30 min: 30:00
    assert first[8:] == ["normal", line["first"].name, "no_such_gpu_type"]  # no node at all
    assert lines[4].split()[2:5] == ["3", "2", str(line["second"].pk)]


@pytest.mark.django_db(transaction=True)
def test_the_cli_says_when_no_cycle_has_run(cli):  # noqa: F811
    done = cli("queue")

    assert done.returncode == 0, done.stderr
    assert done.stdout == "no line recorded yet: the scheduler has not run a cycle\n"


def test_the_portal_page_lists_the_line(line, alice, client):
    client.force_login(alice)

    page = client.get("/queue/").content.decode()

    assert "waiting jobs; your teams': alpha 2." in page
    places = [page.index(f"<td>{line[name].pk}</td>") for name in ("first", "second")]
    assert places == sorted(places)
    assert f"<td>{line['gamma'].pk}</td>" not in page
    assert "<tr><td>2</td><td>1</td>" in page and "<tr><td>3</td><td>2</td>" in page


def test_the_portal_page_names_a_bad_parameter(line, alice, client):
    client.force_login(alice)

    response = client.get("/queue/", {"limit": "0"})

    assert response.status_code == 400
    assert 'data-field="limit">limit: From 1 to 1000.' in response.content.decode()


def test_the_portal_page_says_when_there_is_no_line(alice, client):
    client.force_login(alice)

    page = client.get("/queue/").content.decode()

    assert "No line yet: the scheduler has not run a cycle." in page


def test_the_job_list_says_a_queued_jobs_place_in_line(line, alice, client):
    client.force_login(alice)

    page = client.get("/").content.decode()

    assert page.count(" in line</small>") == 2
    second = page.index(f"<td>{line['second'].pk}</td>")
    assert page.index("3rd in line</small>", second) < page.index("</tr>", second)


def test_the_overviews_queue_links_to_the_line(line, alice, client, settings):
    settings.MLSCHED_METRICS_CACHE_S = 0
    client.force_login(alice)

    page = client.get("/overview/").content.decode()

    assert '<a id="in-line" href="/queue/">Your teams\' jobs in line</a>' in page


def test_the_api_list_gives_a_queued_jobs_place_and_the_cli_says_it(line, alice):
    listed = {j["id"]: j["place"] for j in api(alice).get("/api/v1/jobs/").json()["jobs"]}

    assert listed == {line["first"].pk: 2, line["second"].pk: 3}


@pytest.mark.django_db(transaction=True)
def test_the_cli_list_says_a_queued_jobs_place_before_why_it_waits(cli, line):  # noqa: F811
    done = cli("list")

    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()
    (second,) = [row for row in rows if row.split()[0] == str(line["second"].pk)]
    assert second.endswith(f"{line['second'].name}  (3rd in line, no_such_gpu_type)")
