"""Where a waiting job stands in line: recorded by the cycle, read by the job's document."""

import math
import time
from datetime import timedelta

import pytest
from django.core.cache import caches
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs import actions, cycle, standing
from jobs.models import Job
from jobs.placement.model import Policy
from jobs.placement.ordering import Points, owner_points
from jobs.states import State
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory, UserFactory
from tests.jobs.test_queue_line import api

pytestmark = pytest.mark.django_db


@pytest.fixture
def normal(db):
    return PriorityClassFactory(name="normal", value=0)


@pytest.fixture
def high(db):
    return PriorityClassFactory(name="high", value=100)


def waiting(tenant, owner, klass, minutes_ago=0, **kw):
    """A job of one 8-GPU worker submitted `minutes_ago` (no node here holds it)."""
    job = JobFactory(tenant=tenant, owner=owner, priority_class=klass, gpus=8, **kw)
    Job.objects.filter(pk=job.pk).update(created=timezone.now() - timedelta(minutes=minutes_ago))
    job.refresh_from_db()
    return job


def standing_of(job):
    job.refresh_from_db()
    return standing.of(job)


def test_it_stands_a_teams_jobs_in_line_by_their_priority(alpha, alice, normal):
    low, top, middle = (waiting(alpha, alice, normal, priority=p) for p in (0, 50, 10))

    cycle.run_cycle()

    places = [(standing_of(j).position, standing_of(j).in_team) for j in (top, middle, low)]
    assert places == [(1, 1), (2, 2), (3, 3)]
    assert standing_of(low).ahead_in_team == 2
    assert (standing_of(low).waiting, standing_of(low).team_waiting) == (3, 3)


def test_it_counts_the_jobs_ahead_by_why_they_are_ahead(alpha, gamma, alice, charlie, normal, high):
    ours = waiting(alpha, alice, normal, minutes_ago=10)
    theirs_high = waiting(gamma, charlie, high)
    # Gamma's head job has waited longer: its turn comes first in their class.
    theirs_first = waiting(gamma, charlie, normal, minutes_ago=60)
    ours_next = waiting(alpha, alice, normal, minutes_ago=5)

    cycle.run_cycle()

    mine = standing_of(ours_next)
    assert standing_of(theirs_high).position == 1
    assert standing_of(theirs_first).position == 2
    assert standing_of(ours).position == 3
    assert (mine.position, mine.in_team) == (4, 2)
    assert (mine.ahead_in_team, mine.ahead_higher_class, mine.ahead_other_teams) == (1, 1, 1)
    assert standing.line_sentence(mine) == (
        "4th in line of 4 waiting jobs (2nd of its team's 2); ahead of it: 1 of its team's, "
        "1 of other teams at a higher class, 1 of other teams whose turn came first (fair share)."
    )


def test_its_points_add_up_to_the_priority_its_team_orders_it_by(
    alpha, alice, bob, east, normal, settings
):
    settings.MLSCHED_LINE_EVERY_S = 0  # each cycle keeps its line
    # Bob holds 3 GPUs in the team; his job and Alice's wait behind a full node.
    NodeFactory(cluster=east, gpu_count=3)
    JobFactory(tenant=alpha, owner=bob, priority_class=normal, gpus=3)
    cycle.run_cycle()
    alices = waiting(alpha, alice, normal, minutes_ago=120, priority=5, max_runtime_s=7200)
    bobs = waiting(alpha, bob, normal, minutes_ago=30, priority=5)

    cycle.run_cycle()

    a, b = standing_of(alices), standing_of(bobs)
    policy = Policy()
    assert a.points.priority == 5
    assert a.points.waited == pytest.approx(2.0 * policy.aging_priority_per_hour, abs=0.01)
    assert a.gpu_hours == 16.0  # 8 GPUs for 2 hours
    assert a.points.size == pytest.approx(policy.size_priority_per_doubling * math.log2(16 * 60))
    assert (a.owner_gpus, a.points.owner) == (0.0, 0.0)
    assert b.owner_gpus == 3.0
    assert b.points.owner == pytest.approx(owner_points(policy, 3.0))
    assert a.points.total == pytest.approx(
        a.points.priority + a.points.waited - a.points.size - a.points.owner
    )
    # The order is the points': Alice's job, larger, is ahead for Bob's GPUs.
    assert (a.points.total > b.points.total) == (a.position < b.position)
    assert "for the 3 GPUs its owner holds in the team" in standing.points_sentence(b, 1800)


def test_one_owners_jobs_are_not_docked_for_the_owners_gpus(alpha, alice, normal):
    job = waiting(alpha, alice, normal)

    cycle.run_cycle()

    mine = standing_of(job)
    assert (mine.owner_gpus, mine.points.owner) == (None, 0.0)
    assert "owner" not in standing.points_sentence(mine, 0)


def test_a_placed_job_has_no_place_in_line_and_moves_the_others_up(alpha, alice, east, normal):
    NodeFactory(cluster=east, gpu_count=8)
    first = waiting(alpha, alice, normal, priority=10)
    second = waiting(alpha, alice, normal)

    cycle.run_cycle()

    assert standing_of(first) is None  # scheduled
    assert (standing_of(second).position, standing_of(second).waiting) == (1, 1)


def test_a_held_job_and_one_submitted_since_the_cycle_have_no_place(alpha, alice, normal):
    held = waiting(alpha, alice, normal)
    cycle.run_cycle()
    Job.objects.filter(pk=held.pk).update(held="user")
    later = JobFactory(tenant=alpha, owner=alice, priority_class=normal, gpus=8)

    assert standing_of(held) is None
    assert standing_of(later) is None


def test_a_job_the_cycle_did_not_reach_is_further_back(alpha, alice, normal, settings):
    settings.MLSCHED_QUEUE_DEPTH = 1
    first = waiting(alpha, alice, normal, priority=1)
    second = waiting(alpha, alice, normal)

    cycle.run_cycle()

    back = standing_of(second)
    assert standing_of(first).position == 1
    assert (back.position, back.points, back.waiting) == (None, None, 2)
    assert standing.line_sentence(back) == (
        "Further back in line than the last cycle looked, of 2 waiting jobs (2 its team's)."
    )


def test_the_line_records_its_first_jobs_and_counts_the_rest(alpha, alice, normal, monkeypatch):
    monkeypatch.setattr(standing, "RECORDED", 2)
    jobs = [waiting(alpha, alice, normal, priority=p) for p in (3, 2, 1)]

    cycle.run_cycle()

    assert [standing_of(j).position for j in jobs] == [1, 2, None]
    assert standing_of(jobs[2]).waiting == 3


def test_the_job_document_gives_its_standing(alpha, alice, normal):
    job = waiting(alpha, alice, normal, minutes_ago=90, priority=7)
    cycle.run_cycle()
    client = APIClient()
    client.force_authenticate(alice)

    data = client.get(f"/api/v1/jobs/{job.pk}/").json()["standing"]

    places = ("position", "waiting", "in_team", "team_waiting")
    assert [data[k] for k in places] == [1, 1, 1, 1]
    assert data["ahead"] == {"in_team": 0, "higher_class": 0, "other_teams": 0}
    assert data["points"]["priority"] == 7
    assert data["points"]["total"] == pytest.approx(
        7 + data["points"]["waited"] - data["points"]["size"]
    )
    assert data["sentence"] == "1st in line of 1 waiting job (1st of its team's 1)."
    assert data["points_sentence"].startswith("Its points in its team's line: ")
    assert "for 1.5 h waited" in data["points_sentence"]


def test_a_running_jobs_document_has_no_standing(alpha, alice, east, normal):
    NodeFactory(cluster=east, gpu_count=8)
    job = waiting(alpha, alice, normal)
    cycle.run_cycle()
    client = APIClient()
    client.force_authenticate(alice)

    data = client.get(f"/api/v1/jobs/{job.pk}/").json()

    assert data["state"] == State.SCHEDULED
    assert data["standing"] is None


def test_the_line_is_kept_at_most_every_mlsched_line_every_s(alpha, alice, normal, settings):
    settings.MLSCHED_LINE_EVERY_S = 1
    first, second = waiting(alpha, alice, normal, priority=1), waiting(alpha, alice, normal)
    cycle.run_cycle()
    actions.cancel(first, "canceled by alice")

    cycle.run_cycle()  # within the second: the line kept is the first cycle's
    kept = standing_of(second)
    time.sleep(1.1)
    cycle.run_cycle()

    assert (kept.position, kept.waiting) == (2, 2)
    assert (standing_of(second).position, standing_of(second).waiting) == (1, 1)


def test_the_cycle_places_jobs_while_the_line_cannot_be_kept(alpha, alice, east, normal, settings):
    settings.CACHES = {
        **settings.CACHES,
        "shared": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
        },
    }
    NodeFactory(cluster=east, gpu_count=8)
    placed, left = waiting(alpha, alice, normal, priority=1), waiting(alpha, alice, normal)

    result = cycle.run_cycle()

    assert result.placed == [placed.pk]
    assert standing_of(left) is None


def test_ordinals_read_as_english():
    assert [standing.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111, 1002)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th",
        "1,002nd",
    ]  # fmt: skip


def test_another_user_reads_no_standing_of_a_job_they_cannot_see(alpha, alice, normal):
    job = waiting(alpha, alice, normal)
    cycle.run_cycle()
    client = APIClient()
    client.force_authenticate(UserFactory(username="mallory"))

    assert client.get(f"/api/v1/jobs/{job.pk}/").status_code == 404


def test_the_job_page_says_where_it_stands(alpha, alice, normal, client):
    ahead = waiting(alpha, alice, normal, priority=3)
    job = waiting(alpha, alice, normal)
    cycle.run_cycle()
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/").content.decode()
    first_page = client.get(f"/jobs/{ahead.pk}/").content.decode()

    assert (
        '<p id="standing">2nd in line of 2 waiting jobs (2nd of its team&#x27;s 2); '
        "ahead of it: 1 of its team&#x27;s.</p>"
    ) in page
    assert "Its points in its team&#x27;s line: " in page
    assert '<p id="standing">1st in line' in first_page


def test_the_points_read_term_by_term():
    at = timezone.now()
    held = standing.Standing(at, 2, 2, 1, 1, points=Points(5, 2, 158.4, 0), owner_gpus=0.0,
                             gpu_hours=16.0)  # fmt: skip
    docked = standing.Standing(at, 2, 2, 2, 2, points=Points(0, 0.5, 142.4, 32), owner_gpus=3.0,
                               gpu_hours=8.0)  # fmt: skip

    assert standing.points_sentence(held, 7200) == (
        "Its points in its team's line: -151.4 (priority 5, + 2 for 2 h waited, - 158.4 for its "
        "size: 16 GPU-hours at its runtime limit, - 0: its owner holds no GPUs in the team)."
    )
    assert standing.points_sentence(docked, 1800) == (
        "Its points in its team's line: -173.9 (priority 0, + 0.5 for 30 min waited, - 142.4 for "
        "its size: 8 GPU-hours at its runtime limit, - 32 for the 3 GPUs its owner holds in the "
        "team)."
    )


def test_a_reader_granted_the_job_alone_is_not_shown_its_teams_line(
    alpha, alice, charlie, normal, client
):
    job = waiting(alpha, alice, normal)
    cycle.run_cycle()
    assign_perm("view_job", charlie, job)
    client.force_login(charlie)

    document = api(charlie).get(f"/api/v1/jobs/{job.pk}/")
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert document.status_code == 200 and document.json()["standing"] is None
    assert api(alice).get(f"/api/v1/jobs/{job.pk}/").json()["standing"]["position"] == 1
    assert '<p id="standing" hidden></p>' in page


def test_a_process_reads_each_recorded_line_once(alpha, alice, normal, settings, monkeypatch):
    settings.MLSCHED_LINE_EVERY_S = 0
    job = waiting(alpha, alice, normal)
    cycle.run_cycle()
    shared, read = caches["shared"], []
    real_get = shared.get
    monkeypatch.setattr(shared, "get", lambda key, *a, **kw: read.append(key) or real_get(key))

    first = [standing_of(job).position for _ in range(3)]
    cycle.run_cycle()
    again = standing_of(job)

    assert first == [1, 1, 1] and again.position == 1
    assert read.count(standing.KEY) == 2  # once per line recorded
    assert read.count(standing.STAMP) == 4  # once per read
