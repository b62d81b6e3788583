"""What the admin's pages cost as the platform grows: queries that do not grow with the rows,
counts that stop, orderings the primary key's index serves (bench/surfaces.py measures them
at production size)."""

import re

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from clusters.models import Allocation
from jobs.models import JobEvent, LogChunk
from quotas.models import Membership
from tests.factories import (
    AttemptFactory,
    ClusterFactory,
    JobFactory,
    NodeFactory,
    TenantFactory,
    UserFactory,
)

SCHEDULES = {
    CrontabSchedule: lambda: CrontabSchedule.objects.create(minute="30", hour="3"),
    IntervalSchedule: lambda: IntervalSchedule.objects.create(every=10, period="minutes"),
    SolarSchedule: lambda: SolarSchedule.objects.create(event="sunrise", latitude=52.5,
                                                        longitude=13.4),
    ClockedSchedule: lambda: ClockedSchedule.objects.create(clocked_time=timezone.now()),
}  # fmt: skip
TABLES = {"job": "jobs_job", "attempt": "jobs_attempt", "jobevent": "jobs_jobevent",
          "logchunk": "jobs_logchunk", "allocation": "clusters_allocation"}  # fmt: skip
CHANGELISTS = {"job": "/admin/jobs/job/", "attempt": "/admin/jobs/attempt/",
               "jobevent": "/admin/jobs/jobevent/", "logchunk": "/admin/jobs/logchunk/",
               "allocation": "/admin/clusters/allocation/"}  # fmt: skip


@pytest.fixture
def admin_client(client, db):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def run_of_work(tenant=None):
    """A job that ran once: its attempt, an event, a log line and a released allocation."""
    job = JobFactory(**({"tenant": tenant} if tenant else {}))
    attempt = AttemptFactory(job=job, outcome="succeeded")
    JobEvent.objects.create(job=job, attempt=attempt, from_state="running", to_state="succeeded")
    LogChunk.objects.create(attempt=attempt, seq=1, text="done")
    node = NodeFactory(cluster=attempt.cluster)
    Allocation.objects.create(attempt=attempt, node=node, active=False, released=timezone.now())
    return job


def sql_of(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return [query["sql"] for query in queries]


def test_the_cluster_page_costs_the_same_queries_for_2_nodes_as_for_20(admin_client):
    cluster = ClusterFactory()
    NodeFactory.create_batch(2, cluster=cluster)
    sql_of(admin_client, f"/admin/clusters/cluster/{cluster.pk}/change/")  # caches warmed
    few = len(sql_of(admin_client, f"/admin/clusters/cluster/{cluster.pk}/change/"))
    NodeFactory.create_batch(18, cluster=cluster)

    assert len(sql_of(admin_client, f"/admin/clusters/cluster/{cluster.pk}/change/")) == few


def test_the_job_page_costs_the_same_queries_for_4_attempts_as_for_1(admin_client):
    # Each attempt's row is labelled with its job's name.
    job = run_of_work()
    sql_of(admin_client, f"/admin/jobs/job/{job.pk}/change/")  # caches warmed
    one = len(sql_of(admin_client, f"/admin/jobs/job/{job.pk}/change/"))
    for number in (2, 3, 4):
        AttemptFactory(job=job, number=number, outcome="preempted", ended_at=timezone.now())

    assert len(sql_of(admin_client, f"/admin/jobs/job/{job.pk}/change/")) == one


@pytest.mark.parametrize("kind", [CrontabSchedule, IntervalSchedule, SolarSchedule,
                                  ClockedSchedule])  # fmt: skip
def test_a_schedules_page_costs_the_same_queries_for_4_periodic_tasks_as_for_1(admin_client, kind):
    # Each task's row is labelled with its schedule.
    schedule = SCHEDULES[kind]()
    field = kind._meta.model_name.removesuffix("schedule")
    page = f"/admin/django_celery_beat/{kind._meta.model_name}/{schedule.pk}/change/"

    def task(name: str) -> None:
        PeriodicTask.objects.create(name=name, task="jobs.tasks.retention",
                                    one_off=field == "clocked", **{field: schedule})  # fmt: skip

    task("first")
    sql_of(admin_client, page)  # caches warmed
    one = len(sql_of(admin_client, page))
    for name in ("second", "third", "fourth"):
        task(name)

    assert len(sql_of(admin_client, page)) == one


def test_the_cluster_page_links_each_node_to_its_page_instead_of_a_form_per_node(admin_client):
    # A form per node took ~5 ms each to render: half a second for a 100-node cluster.
    node = NodeFactory(name="gpu-node-7")

    page = admin_client.get(f"/admin/clusters/cluster/{node.cluster_id}/change/")

    assert f'href="/admin/clusters/node/{node.pk}/change/">gpu-node-7<' in page.text
    assert f"?cluster__id__exact={node.cluster_id}" in page.text
    assert 'name="nodes-0-name"' not in page.text


@pytest.mark.parametrize("model", CHANGELISTS)
def test_a_changelist_counts_its_rows_only_up_to_a_cap(admin_client, model):
    run_of_work()

    counts = [q for q in sql_of(admin_client, CHANGELISTS[model]) if "COUNT(" in q]

    assert counts, "the changelist numbers its pages from a count"
    assert all(re.search(r"LIMIT \d+", q) for q in counts), counts


def test_a_changelist_past_the_cap_says_there_are_more(admin_client, monkeypatch):
    from jobs.admin import CappedPaginator

    monkeypatch.setattr(CappedPaginator, "CAP", 3)
    for _ in range(5):
        run_of_work()

    page = admin_client.get("/admin/jobs/jobevent/")

    assert re.search(r"3\+\s+job events", page.text)


@pytest.mark.parametrize("model", ["job", "attempt", "jobevent", "logchunk"])
def test_a_changelist_lists_newest_first_by_its_primary_key(admin_client, model):
    run_of_work()
    table = TABLES[model]

    sql = sql_of(admin_client, CHANGELISTS[model])

    # The models' own orderings follow foreign keys to the job's creation time: a sort of the
    # whole table for every page.
    rows = [q for q in sql if f'FROM "{table}"' in q and "ORDER BY" in q]
    assert rows and rows[-1].endswith(f'ORDER BY "{table}"."id" DESC'), rows


def test_the_job_lists_tenant_filter_does_not_read_every_jobs_tenant(admin_client, alpha, gamma):
    run_of_work(alpha)

    sql = sql_of(admin_client, "/admin/jobs/job/")

    assert not [q for q in sql if 'DISTINCT U0."tenant_id"' in q and '"jobs_job"' in q]


def test_the_job_lists_tenant_filter_offers_a_tenant_admin_their_own_tenants(
    client, alpha, alice, gamma
):
    alice.is_staff = True
    alice.save()
    alice.user_permissions.add(Permission.objects.get(codename="view_job"))
    beta = TenantFactory(name="Beta", slug="beta")
    Membership.objects.create(tenant=beta, user=alice, role=Membership.Role.OWNER)
    for tenant in (alpha, beta, gamma):
        run_of_work(tenant)
    client.force_login(alice)

    page = client.get("/admin/jobs/job/")

    assert "tenant__id__exact" in page.text
    assert "Alpha" in page.text and "Beta" in page.text and "Gamma" not in page.text


def test_a_batch_listing_starts_at_its_last_shard_not_at_the_newest_job(client, alpha, alice):
    # The planner walks the primary key back from the newest job, filtering: for a batch
    # submitted 140,000 jobs ago, 140,000 rows read for a page of 100.
    first = JobFactory(tenant=alpha, family="batch_inference", shards=3, shard_index=0)
    rest = [JobFactory(tenant=alpha, parent=first, shards=3, shard_index=i) for i in (1, 2)]
    JobFactory(tenant=alpha)  # submitted since
    client.force_login(alice)

    with CaptureQueriesContext(connection) as queries:
        listed = client.get(f"/api/v1/jobs/?batch={first.pk}").json()["jobs"]

    assert [job["id"] for job in listed] == [rest[1].pk, rest[0].pk, first.pk]
    page = [q["sql"] for q in queries if "LIMIT 100" in q["sql"]]
    assert page and f'"jobs_job"."id" <= {rest[1].pk}' in page[0], page


def test_past_the_cap_a_changelist_pages_on_to_older_rows_by_id(admin_client, monkeypatch):
    from django.contrib import admin

    from jobs.admin import CappedPaginator
    from jobs.models import JobEvent

    monkeypatch.setattr(CappedPaginator, "CAP", 5)
    monkeypatch.setattr(admin.site._registry[JobEvent], "list_per_page", 2)
    for _ in range(9):
        run_of_work()
    ids = list(JobEvent.objects.order_by("-id").values_list("pk", flat=True))

    def page(query: str) -> tuple[list[int], str | None]:
        text = admin_client.get("/admin/jobs/jobevent/" + query).text
        older = re.search(r'href="(\?[^"]*)" class="older"', text)
        shown = [int(pk) for pk in re.findall(r"/admin/jobs/jobevent/(\d+)/change/", text)]
        return shown, older.group(1).replace("&amp;", "&") if older else None

    first, older = page("")
    second, _ = page(older)
    _, sorted_by_column = page("?o=1")

    assert len(ids) > 5  # past the cap
    assert (first, second) == (ids[:2], ids[2:4])
    assert sorted_by_column is None
