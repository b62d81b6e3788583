"""No page of the admin costs more queries as the platform grows: as a platform admin, and as a
tenant admin for the pages they may open, every registered model's list, add page and the
change page of the first of its rows they see is counted (each asked twice first, so that
caches are warm); then the world grows (more rows of every model, and more of the rows each
list shows per row and each change page shows of its row: members, quotas, nodes, attempts,
events, allocations, bookings, secrets, tokens...) and each page is counted again. A page
whose count grew asks once per row (an N+1): the failure names it, its counts before and
after, and the queries it repeated."""

import re
from collections import Counter
from datetime import date, timedelta
from decimal import Decimal
from urllib.parse import quote

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client, RequestFactory
from django.utils import timezone
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from clusters.models import Allocation, Booking, Cluster, MaintenanceWindow, Node
from jobs.models import Attempt, Dependency, Job, JobEvent, LogChunk
from jobs.records import BudgetAlert
from quotas import history, tenant_secrets, tokens
from quotas.models import PriorityClass, Quota, Rate, ScimGroup, SignIn, Tenant
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    NodeFactory,
    TenantFactory,
    TenantVolumeFactory,
    UserFactory,
)
from tests.jobs.test_query_counts import run_of_work, sql_of
from tests.security.test_admin_scope import tenant_admin  # noqa: F401 (a fixture)
from tests.test_admin_bad_input import admins_world, listing  # noqa: F401 (a fixture)
from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_openapi import root, world  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

MORE = 3  # rows the world grows by, of each kind and under each first row


def asking(user):
    """A request of the user's, as the admin's permissions and scopes read it."""
    request = RequestFactory().get("/")
    request.user = user
    return request


def first(model, user):
    """The first of the model's rows the user sees in the admin: the one its page shows."""
    return admin.site._registry[model].get_queryset(asking(user)).order_by("pk").first()


def pages(user) -> list[str]:
    """The pages of every registered model the user may open: its list, its add page and the
    change page of the first of its rows they see."""
    found = []
    for model, model_admin in admin.site._registry.items():
        if not model_admin.has_view_or_change_permission(asking(user)):
            continue
        found.append(listing(model))
        if model_admin.has_add_permission(asking(user)):
            found.append(f"{listing(model)}add/")
        if row := first(model, user):
            found.append(f"{listing(model)}{quote(str(row.pk))}/change/")
    return found


def counted(browser: Client, urls: list[str], warming: int) -> dict[str, list[str]]:
    """Each page's queries, asked once it has been asked `warming` times (caches warmed)."""
    for url in urls:
        for _ in range(warming):
            sql_of(browser, url)
    return {url: sql_of(browser, url) for url in urls}


def shape(sql: str) -> str:
    """A query with its values left out (and a server-side cursor's name's number): the
    queries of one shape differ by an id."""
    sql = re.sub(r"'(?:[^']|'')*'", "?", sql)
    sql = re.sub(r"\d+(\.\d+)?", "?", sql)
    return re.sub(r"\(\?(, \?)*\)", "(?...)", sql)


def brief(shape: str) -> str:
    """A shape as a failure shows it: the columns each SELECT reads left out."""
    return re.sub(r"SELECT .*? FROM", "SELECT ... FROM", shape)[:400]


def growths(before: dict, after: dict) -> list[str]:
    """The pages whose queries grew, each with its counts and the shapes it asked more."""
    said = []
    for url, sql in after.items():
        if len(sql) == len(before[url]):
            continue
        more = Counter(map(shape, sql)) - Counter(map(shape, before[url]))
        repeated = "".join(f"\n    {n} more x {brief(text)}" for text, n in more.most_common(5))
        said.append(f"{url}: {len(before[url])} -> {len(sql)} queries{repeated}")
    return said


def grow(user, tenant) -> None:
    """MORE rows of every model the admin shows, with `tenant` (the user's), and MORE of the
    rows each first row's change page and each list's row show of it."""
    now, day = timezone.now(), timedelta(days=1)
    cluster, node = first(Cluster, user), first(Node, user)
    job, attempt = first(Job, user), first(Attempt, user)
    group, scim = Group.objects.order_by("pk").first(), first(ScimGroup, user)
    person = first(get_user_model(), user)
    for i in range(MORE):
        other = TenantFactory()
        newcomer = UserFactory()
        for team in (tenant, other):
            MembershipFactory(tenant=team, user=newcomer)
            Quota.objects.create(tenant=team, flavor=f"gpu:G{i}", guaranteed=1)
            tenant_secrets.put(team, f"SECRET_{i}", "value")
            TenantVolumeFactory(tenant=team, name=f"data-{i}", clusters=[cluster])
            BudgetAlert.objects.create(tenant=team, month=date(2026, 2 + i, 1), percent=50,
                                       budget_gpu_hours=100, spent_gpu_hours=50.0)  # fmt: skip
            booking = Booking.objects.create(tenant=team, cluster=cluster, reason="paper",
                                             starts_at=now + (10 + i) * day,
                                             ends_at=now + (11 + i) * day)  # fmt: skip
            booking.nodes.add(*cluster.nodes.all())
            later = run_of_work(team)
            Dependency.objects.create(job=later, on=job, kind=Dependency.Kind.AFTERANY)
        more_of_its_rows(i, job, attempt, node, newcomer)
        grow_the_platform(i, cluster, newcomer, group, scim)
        person.groups.add(Group.objects.create(name=f"team-{i}"))
        person.user_permissions.add(*Permission.objects.order_by("pk")[5 * i : 5 * i + 5])
        history.record(newcomer, [tenant, other], f"Changed {i}")


def more_of_its_rows(i: int, job, attempt, node, user) -> None:
    """More of what the first job's, attempt's and node's pages and lists show of them."""
    now = timezone.now()
    later = Attempt.objects.create(job=job, number=10 + i, cluster=attempt.cluster, workers=1,
                                   outcome=Attempt.Outcome.PREEMPTED, ended_at=now)  # fmt: skip
    JobEvent.objects.create(job=job, attempt=later, from_state="running", to_state="queued")
    LogChunk.objects.create(attempt=attempt, seq=100 + i, text="more")
    LogChunk.objects.create(attempt=later, seq=i, text="more")
    Allocation.objects.create(attempt=later, node=node, active=False, released=now)
    Dependency.objects.create(job=job, on=run_of_work(job.tenant), kind=Dependency.Kind.AFTEROK)
    SignIn.objects.create(username=user.username, user=user, method="password", succeeded=True,
                          address="10.0.0.2")  # fmt: skip
    tokens.create_token(user, f"laptop {i}")


def grow_the_platform(i: int, cluster, user, group, scim) -> None:
    """More of the platform's own rows: clusters and nodes, windows, classes, rates, groups
    and users, and the beat scheduler's tasks and schedules."""
    now, day = timezone.now(), timedelta(days=1)
    another = ClusterFactory()
    for where in (cluster, another):
        NodeFactory(cluster=where, topology={"rack": f"r{i}"}, features=["ib"])
        window = MaintenanceWindow.objects.create(cluster=where, starts_at=now + (20 + i) * day,
                                                  ends_at=now + (21 + i) * day)  # fmt: skip
        window.nodes.add(*where.nodes.all())
    planned = MaintenanceWindow.objects.order_by("pk").first()
    planned.nodes.add(*Node.objects.filter(cluster=planned.cluster))
    normal = PriorityClass.objects.order_by("pk").first()
    normal.tenants.add(*Tenant.objects.all())
    PriorityClass.objects.create(name=f"class-{i}", value=100 + i).tenants.add(
        *Tenant.objects.all()
    )
    Rate.objects.create(flavor=f"gpu:G{i}", price=Decimal("1.5"))
    permissions = Permission.objects.order_by("pk")[10 * i : 10 * i + 10]
    group.permissions.add(*permissions)
    group.user_set.add(user)
    Group.objects.create(name=f"group-{i}").permissions.add(*permissions)
    scim.members.add(user)
    ScimGroup.objects.create(display_name=f"scim-{i}", external_id=f"g-{i}").members.add(user)
    beat_schedules(i)


def beat_schedules(i: int) -> None:
    """A schedule of each kind, and a periodic task on it and on the first of its kind."""
    made = [
        CrontabSchedule.objects.create(minute=str(i), hour="4"),
        IntervalSchedule.objects.create(every=20 + i, period=IntervalSchedule.MINUTES),
        SolarSchedule.objects.create(event="sunset", latitude=10 + i, longitude=13.4),
        ClockedSchedule.objects.create(clocked_time=timezone.now() + timedelta(days=2 + i)),
    ]
    for schedule in made:
        kind = type(schedule)
        field = kind._meta.model_name.removesuffix("schedule")
        for on in (schedule, kind.objects.order_by("pk").first()):
            PeriodicTask.objects.create(name=f"{field}-{i}-{on.pk}", task="jobs.tasks.retention",
                                        one_off=field == "clocked",
                                        **{field: on})  # fmt: skip


def assert_no_page_grows(browser: Client, user, tenant) -> list[str]:
    """Each of the user's pages asks as many queries once the world has grown: the pages."""
    urls = pages(user)
    before = counted(browser, urls, warming=2)
    grow(user, tenant)
    after = counted(browser, urls, warming=1)  # what the new rows alone would warm

    grown = growths(before, after)
    assert not grown, "\n".join(grown)
    return urls


def test_no_admin_page_asks_more_queries_as_the_platform_grows(admins_world, root):  # noqa: F811
    browser = Client()
    browser.force_login(root)

    asked = assert_no_page_grows(browser, root, Tenant.objects.get(slug="alpha"))
    assert len([url for url in asked if url.endswith("/change/")]) == len(admin.site._registry)


@pytest.mark.usefixtures("admins_world")
def test_no_admin_page_of_a_tenant_admin_asks_more_queries_as_their_tenant_grows(
    tenant_admin,  # noqa: F811
    alice,
):
    assert_no_page_grows(tenant_admin, alice, Tenant.objects.get(slug="alpha"))
