"""A job's own labels (project=llm, sweep=lr-3): given at submission (the API, the portal's
form, the CLI), kept by every shard and by a resubmission, told in the job document and the
job-end notification, and the job lists narrowed by them, from the labels' index on
PostgreSQL."""

import json

import pytest
from django.db import connection
from rest_framework.test import APIClient

from jobs.models import Job
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_api import SPEC
from tests.jobs.test_cli import SPEC as CLI_SPEC
from tests.jobs.test_cli import cli  # noqa: F401
from tests.jobs.test_hold import viewer  # noqa: F401 - the fixture
from tests.jobs.test_portal import FORM

pytestmark = pytest.mark.django_db

LLM = {"project": "llm", "sweep": "lr-3"}


@pytest.fixture
def normal(db):
    """The default priority class, which submissions name."""
    return PriorityClassFactory(name="normal", value=0)


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(user, **changes):
    return client_for(user).post("/api/v1/jobs/", {**SPEC, **changes}, format="json")


def listed(user, *labels: str) -> list[str]:
    response = client_for(user).get("/api/v1/jobs/", {"label": list(labels)})
    assert response.status_code == 200, response.json()
    return [job["name"] for job in response.json()["jobs"]]


@pytest.mark.usefixtures("normal")
def test_a_job_keeps_the_labels_it_was_submitted_with_on_every_shard(alice):
    response = submit(alice, family="batch_inference", shards=3, workers=1, labels=LLM)

    assert response.status_code == 201
    assert response.json()["labels"] == LLM
    assert [job.labels for job in Job.objects.all()] == [LLM] * 3


@pytest.mark.parametrize(
    "labels",
    [
        {"has space": "x"},
        {"project": "x" * 257},
        {f"k{n}": "v" for n in range(33)},
        {"project": None},
        ["project=llm"],
    ],
    ids=["a key with a space", "a value too long", "33 labels", "a null", "a list"],
)
@pytest.mark.usefixtures("normal")
def test_labels_no_job_may_carry_are_refused_naming_labels_and_nothing_is_written(alice, labels):
    response = submit(alice, labels=labels)

    assert response.status_code == 400
    assert list(response.json()) == ["labels"]
    assert not Job.objects.exists()


def test_the_list_keeps_the_jobs_carrying_every_label_asked(alice, alpha):
    for name, labels in [("a", LLM), ("b", {"project": "llm"}), ("c", {"project": "vision"}),
                         ("d", {})]:  # fmt: skip
        JobFactory(tenant=alpha, owner=alice, name=name, labels=labels)

    assert listed(alice, "project=llm") == ["b", "a"]
    assert listed(alice, "project=llm", "sweep=lr-3") == ["a"]
    assert listed(alice, "project") == ["c", "b", "a"]  # a key alone: any value
    assert listed(alice, "project=") == []  # an empty value is a value
    assert listed(alice) == ["d", "c", "b", "a"]


def test_the_list_never_shows_another_teams_job_by_its_label(alice, charlie, gamma):
    JobFactory(tenant=gamma, owner=charlie, labels={"project": "llm"})

    assert listed(alice, "project=llm") == []


@pytest.mark.parametrize("label", ["=llm", "has space=x", "x" * 254])
def test_a_label_no_job_could_carry_is_refused_naming_label(alice, label):
    response = client_for(alice).get("/api/v1/jobs/", {"label": label})

    assert response.status_code == 400
    assert list(response.json()) == ["label"]


def test_the_label_filter_is_answered_from_the_labels_index(alice, alpha):
    JobFactory(tenant=alpha, owner=alice, labels=LLM)
    jobs = Job.objects.labelled([("project", "llm"), ("sweep", None)])
    sql, params = jobs.query.sql_with_params()

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the table is tiny: ask for the index
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "job_labels_gin" in plan
    assert list(jobs) == list(Job.objects.all())


@pytest.mark.usefixtures("normal")
def test_a_resubmission_keeps_the_labels(alice):
    first = submit(alice, labels=LLM).json()
    Job.objects.filter(pk=first["id"]).update(state="failed")

    again = client_for(alice).post(f"/api/v1/jobs/{first['id']}/resubmit/", {}, format="json")

    assert again.status_code == 201 and again.json()["labels"] == LLM


@pytest.mark.usefixtures("normal")
def test_the_portal_submits_labels_lists_by_them_and_shows_them(client, alice, alpha):
    client.force_login(alice)
    JobFactory(tenant=alpha, owner=alice, name="other")

    submitted = client.post("/jobs/new/", {**FORM, "labels": "project=llm\r\nsweep=lr-3"})
    job = Job.objects.get(name="resnet")
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    found = client.get("/", {"label": "sweep=lr-3"}).content.decode()
    refused = client.get("/", {"label": "=x"})

    assert submitted.status_code == 302 and job.labels == LLM
    assert '<a href="/?label=project%3Dllm"><code>project=llm</code></a>' in page
    assert f'href="/jobs/{job.pk}/"' in found and ">other</a>" not in found
    assert refused.status_code == 400 and 'data-field="label"' in refused.content.decode()


def test_the_cli_submits_with_labels_and_lists_by_them(cli, alice):  # noqa: F811
    spec = json.dumps({**CLI_SPEC, "labels": {"project": "llm"}})
    first = cli("submit", "-", "--label", "sweep=lr-3", stdin=spec)
    cli("submit", "-", stdin=json.dumps(CLI_SPEC))

    listed_ = cli("list", "--label", "project=llm", "--label", "sweep")
    bad = cli("submit", "-", "--label", "no-equals", stdin=spec)

    assert first.returncode == 0, first.stderr
    job_id = int(first.stdout.split()[0])
    assert Job.objects.get(pk=job_id).labels == LLM
    assert [int(line.split()[0]) for line in listed_.stdout.splitlines()] == [job_id]
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


def test_a_cancel_by_labels_ends_the_live_jobs_carrying_all_of_them(alice, alpha, charlie, gamma):
    sweep = JobFactory(tenant=alpha, owner=alice, labels=LLM)
    other = JobFactory(tenant=alpha, owner=alice, labels={"project": "llm"})
    theirs = JobFactory(tenant=gamma, owner=charlie, labels=LLM)
    ended = JobFactory(tenant=alpha, owner=alice, labels=LLM, state="succeeded")

    answer = client_for(alice).post("/api/v1/jobs/cancel/", {"labels": LLM}, format="json")

    assert answer.status_code == 202 and answer.json()["canceled"] == [sweep.pk]
    states = dict(Job.objects.values_list("pk", "state"))
    assert [states[j.pk] for j in (sweep, other, theirs, ended)] == [
        "canceled", "queued", "queued", "succeeded"]  # fmt: skip


@pytest.mark.parametrize("labels", [{}, {"has space": "x"}, "sweep=lr-3"])
def test_a_cancel_by_labels_no_job_could_carry_is_refused_naming_labels(alice, alpha, labels):
    JobFactory(tenant=alpha, owner=alice, labels=LLM)

    answer = client_for(alice).post("/api/v1/jobs/cancel/", {"labels": labels}, format="json")

    assert answer.status_code == 400 and list(answer.json()) == ["labels"]
    assert not Job.objects.filter(state="canceled").exists()


def test_the_cli_cancels_a_sweep_by_its_label(cli, alice, alpha):  # noqa: F811
    sweep = [JobFactory(tenant=alpha, owner=alice, labels=LLM) for _ in range(3)]
    kept = JobFactory(tenant=alpha, owner=alice)

    done = cli("cancel", "--label", "sweep=lr-3")

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "canceled 3 jobs"
    assert set(Job.objects.filter(state="canceled")) == set(sweep)
    assert Job.objects.get(pk=kept.pk).state == "queued"


def test_the_job_list_shows_each_jobs_labels_as_links_to_the_jobs_carrying_them(
    client, alice, alpha
):
    JobFactory(tenant=alpha, owner=alice, labels={"project": "llm"})
    client.force_login(alice)

    page = client.get("/").content.decode()

    assert '<a class="job-label" href="/?label=project%3Dllm"' in page


def relabel(user, job, **change):
    return client_for(user).post(f"/api/v1/jobs/{job.pk}/labels/", change, format="json")


def test_a_jobs_labels_are_set_and_removed_in_any_state(alice, alpha):
    ended = JobFactory(tenant=alpha, owner=alice, labels=LLM, state="succeeded")

    answer = relabel(alice, ended, labels={"keep": "best", "sweep": "lr-4"}, remove=["project"])

    assert answer.status_code == 200
    assert answer.json()["labels"] == {"sweep": "lr-4", "keep": "best"}
    assert Job.objects.get(pk=ended.pk).labels == {"sweep": "lr-4", "keep": "best"}
    assert listed(alice, "keep=best") == [ended.name]
    event = ended.events.get()  # the history says what changed, and who changed it
    assert (event.from_state, event.to_state) == ("succeeded", "succeeded")
    assert event.reason == "labels changed by alice: keep=best, sweep=lr-4; removed project"


@pytest.mark.usefixtures("normal")
def test_a_batch_is_relabelled_through_its_first_shard_and_a_shard_alone_is_a_conflict(alice):
    first = submit(alice, family="batch_inference", shards=3, workers=1, labels=LLM).json()
    shard = Job.objects.get(parent_id=first["id"], shard_index=2)

    answer = client_for(alice).post(
        f"/api/v1/jobs/{first['id']}/labels/", {"remove": ["sweep"]}, format="json"
    )
    refused = relabel(alice, shard, labels={"x": "y"})

    assert (answer.status_code, answer.json()["changed"]) == (200, 3)
    assert [job.labels for job in Job.objects.all()] == [{"project": "llm"}] * 3
    assert refused.status_code == 409 and f"#{first['id']}" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({}, "labels"),
        ({"labels": {"a": "1"}, "remove": ["a"]}, "remove"),
        ({"remove": ["has space"]}, "remove"),
        ({"labels": {f"k{n}": "v" for n in range(31)}}, "labels"),  # 2 + 31 > 32
    ],
    ids=["nothing", "a key set and removed", "a key no label has", "too many in all"],
)
def test_a_change_of_labels_refused_names_the_field_and_writes_nothing(alice, alpha, change, field):
    job = JobFactory(tenant=alpha, owner=alice, labels=LLM)

    answer = relabel(alice, job, **change)

    assert answer.status_code == 400 and list(answer.json()) == [field]
    assert Job.objects.get(pk=job.pk).labels == LLM


def test_a_viewer_may_not_relabel_and_another_team_gets_a_404(alice, alpha, charlie, viewer):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, labels=LLM)

    assert relabel(viewer, job, labels={"x": "y"}).status_code == 403
    assert relabel(charlie, job, labels={"x": "y"}).status_code == 404
    assert Job.objects.get(pk=job.pk).labels == LLM


def test_the_cli_sets_and_removes_a_jobs_labels(cli, alice, alpha):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, labels=LLM)

    done = cli("label", str(job.pk), "keep=best", "--remove", "sweep")

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "labels keep=best, project=llm on 1 job"  # as jsonb keeps them
    assert Job.objects.get(pk=job.pk).labels == {"project": "llm", "keep": "best"}


def test_the_job_page_replaces_a_jobs_labels_with_those_typed(client, alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, labels=LLM, state="failed")
    client.force_login(alice)
    url = f"/jobs/{job.pk}/labels/"

    page = client.get(f"/jobs/{job.pk}/").content.decode()
    saved = client.post(url, {"labels": "project=llm\r\nkeep=best\r\n"})
    refused = client.post(url, {"labels": "no equals sign"})

    assert 'id="labels-form"' in page and "sweep=lr-3\n" in page
    assert saved.status_code == 302 and saved.url == f"/jobs/{job.pk}/"
    assert Job.objects.get(pk=job.pk).labels == {"project": "llm", "keep": "best"}
    assert refused.status_code == 400 and "has no &#x27;=&#x27;" in refused.content.decode()
    assert 'aria-invalid="true"' in refused.content.decode()


def test_a_viewer_sees_the_labels_but_no_form_to_change_them(client, alpha, viewer):  # noqa: F811
    job = JobFactory(tenant=alpha, labels=LLM)
    client.force_login(viewer)

    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert "<code>project=llm</code>" in page and 'id="labels-form"' not in page


def test_the_portal_lists_by_several_labels_and_a_labels_link_narrows_further(client, alice, alpha):
    both = JobFactory(tenant=alpha, owner=alice, name="both", labels=LLM)
    JobFactory(tenant=alpha, owner=alice, name="project-only", labels={"project": "llm"})
    JobFactory(tenant=alpha, owner=alice, name="other-project", labels={"project": "cv"})
    client.force_login(alice)

    narrowed = client.get("/?label=project%3Dllm&label=sweep&label=").content.decode()
    by_project = client.get("/", {"label": "project=llm", "state": "queued"}).content.decode()

    assert f'href="/jobs/{both.pk}/"' in narrowed
    assert "project-only" not in narrowed and "other-project" not in narrowed
    # Each label asked has its own field, and one more is offered.
    assert narrowed.count('name="label"') == 3
    assert 'value="project=llm"' in narrowed and 'value="sweep"' in narrowed
    # A job's label adds to what the list is narrowed by.
    assert "/?state=queued&amp;label=project%3Dllm&amp;label=sweep%3Dlr-3" in by_project
    assert "other-project" not in by_project and "project-only" in by_project
