"""Searching jobs by name: the portal's `?q=` and the admin's job search find jobs whose name
holds the text in any case, among the jobs the user may see, through the trigram index of
migration 0022 (PostgreSQL) rather than by reading every job."""

import importlib

import pytest
from django.contrib.auth.models import Permission
from django.db import IntegrityError, connection
from django.db.migrations.executor import MigrationExecutor
from guardian.shortcuts import assign_perm

from jobs.models import Job
from quotas.models import Membership
from tests.factories import JobFactory, MembershipFactory, UserFactory

INDEX = importlib.import_module("jobs.migrations.0022_job_name_trigram").INDEX
BEFORE = [("jobs", "0021_checkpoints_of_their_own")]
AFTER = [("jobs", "0022_job_name_trigram")]

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="a PostgreSQL index: SQLite has none"
)


def name_index() -> tuple[str, bool] | None:
    """The index's definition and whether it is valid, None without it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexdef, x.indisvalid FROM pg_indexes i "
            "JOIN pg_index x ON x.indexrelid = to_regclass(quote_ident(i.indexname)) "
            "WHERE i.tablename = 'jobs_job' AND i.indexname = %s",
            [INDEX],
        )
        return cursor.fetchone()


def searches(client, path: str) -> list[tuple[str, list]]:
    """The statements that search job names while `path` is requested, with their parameters."""
    found = []

    def keep(run, sql, params, many, context):
        if "LIKE" in sql and "jobs_job" in sql:
            found.append((sql, params))
        return run(sql, params, many, context)

    with connection.execute_wrapper(keep):
        assert client.get(path).status_code == 200
    assert found
    return found


def plan(sql: str, params) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@postgresql_only
@pytest.mark.django_db
def test_the_migration_built_a_trigram_index_of_the_name_as_django_searches_it():
    definition, valid = name_index()

    assert valid
    assert "USING gin" in definition and "gin_trgm_ops" in definition
    # `name__icontains` is UPPER("jobs_job"."name"::text) LIKE UPPER(...): the same expression.
    assert "upper((name)::text)" in definition


@postgresql_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("latest_migrations_after")
def test_the_migration_goes_back_without_the_index_and_replaces_a_failed_builds_leftover():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    assert name_index() is None
    # A concurrent build that failed leaves an invalid index under the name: make one.
    old = executor.loader.project_state(BEFORE).apps
    tenant = old.get_model("quotas", "Tenant").objects.create(name="t", slug="t")
    owner = old.get_model("auth", "User").objects.create(username="u")
    normal = old.get_model("quotas", "PriorityClass").objects.create(name="normal", value=0)
    for _ in range(2):
        old.get_model("jobs", "Job").objects.create(
            tenant=tenant, owner=owner, name="same", family="training", image="i",
            command=["x"], cpu_milli=1, memory_mb=1, priority_class=normal, max_runtime_s=60,
        )  # fmt: skip
    failing = f"CREATE UNIQUE INDEX CONCURRENTLY {INDEX} ON jobs_job (name)"
    with connection.cursor() as cursor, pytest.raises(IntegrityError, match="could not create"):
        cursor.execute(failing)
    assert name_index()[1] is False

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    definition, valid = name_index()
    assert valid and "gin_trgm_ops" in definition


def test_the_portal_finds_names_holding_the_text_in_any_case_among_the_users_jobs(
    client, alpha, gamma, alice, charlie
):
    JobFactory(tenant=alpha, owner=alice, name="Whisper-Distill-Ablation")
    JobFactory(tenant=alpha, owner=alice, name="bert-ablation-2")
    JobFactory(tenant=alpha, owner=alice, name="bert-finetune")
    JobFactory(tenant=gamma, owner=charlie, name="gamma-ablation")  # another tenant's
    shared = JobFactory(tenant=gamma, owner=charlie, name="shared-ablation")
    assign_perm("jobs.view_job", alice, shared)  # shown: granted to alice alone
    client.force_login(alice)

    def names(query):
        return [job.name for job in client.get("/" + query).context["jobs"]]

    assert names("?q=ABLATION") == ["shared-ablation", "bert-ablation-2",
                                    "Whisper-Distill-Ablation"]  # fmt: skip
    assert names("?q=distill-abl") == ["Whisper-Distill-Ablation"]
    assert names("?q=rt") == ["bert-finetune", "bert-ablation-2"]  # no trigram: still found
    assert names("?q=gamma") == []


@pytest.fixture
def root(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)


def changelist_names(client, query: str) -> list[str]:
    page = client.get("/admin/jobs/job/" + query)
    assert page.status_code == 200
    return [job.name for job in page.context["cl"].result_list]


def test_the_admin_finds_names_holding_the_text_in_any_case_and_a_job_by_its_id(
    client, alpha, gamma, alice, charlie, root
):
    train = JobFactory(tenant=alpha, owner=alice, name="resnet-Train")
    JobFactory(tenant=gamma, owner=charlie, name="bert-train-2")
    JobFactory(tenant=gamma, owner=charlie, name="bert-eval")
    named_like_an_id = JobFactory(tenant=gamma, owner=charlie, name=f"sweep-{train.pk}")
    client.force_login(root)

    assert changelist_names(client, "?q=TRAIN") == ["bert-train-2", "resnet-Train"]
    assert changelist_names(client, "?q=ev") == ["bert-eval"]
    # A whole number: the job with that id, and names holding it.
    assert changelist_names(client, f"?q={train.pk}") == [named_like_an_id.name, "resnet-Train"]
    assert changelist_names(client, "?q=99999999999999999999") == []  # past any id


def test_a_tenant_admins_search_finds_their_tenants_jobs_only(client, alpha, gamma, charlie):
    owner = UserFactory(username="owner", is_staff=True)
    MembershipFactory(tenant=alpha, user=owner, role=Membership.Role.OWNER)
    owner.user_permissions.add(Permission.objects.get(codename="view_job"))
    JobFactory(tenant=alpha, owner=owner, name="alpha-train")
    other = JobFactory(tenant=gamma, owner=charlie, name="gamma-train")
    client.force_login(owner)

    assert changelist_names(client, "?q=train") == ["alpha-train"]
    assert changelist_names(client, f"?q={other.pk}") == []


def many_jobs(like: Job, count: int) -> None:
    """`count` copies of `like` named `job-<hex>`, written by PostgreSQL itself, then analyzed:
    enough rows for the planner to weigh reading the table against an index."""
    columns = [f.column for f in Job._meta.concrete_fields if f.column not in ("id", "name")]
    listed = ", ".join(columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO jobs_job ({listed}, name) SELECT {listed}, 'job-' || md5(g::text) "
            "FROM jobs_job, generate_series(1, %s) g WHERE id = %s",
            [count, like.pk],
        )
        # Rows a GIN index has not merged yet wait in its pending list, read whole by every
        # search: VACUUM (autovacuum on a live database) merges them, here this function.
        cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [INDEX])
        cursor.execute("ANALYZE jobs_job")


@postgresql_only
def test_the_portal_and_the_admin_search_a_rare_name_through_the_index(client, alpha, alice, root):
    many_jobs(JobFactory(tenant=alpha, owner=alice, name="first"), 20_000)
    JobFactory(tenant=alpha, owner=alice, name="whisper-distill-ablation")
    client.force_login(alice)

    for sql, params in searches(client, "/?q=ablation"):
        assert INDEX in plan(sql, params), plan(sql, params)
    client.force_login(root)
    statements = searches(client, "/admin/jobs/job/?q=ablation")  # the count, then the page
    for sql, params in statements:
        assert INDEX in plan(sql, params), plan(sql, params)
    assert changelist_names(client, "?q=ablation") == ["whisper-distill-ablation"]
