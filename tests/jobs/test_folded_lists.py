"""The API's job list with `?fold=1`, and the CLI's `list`, fold each batch into one row (its
first shard's) with its shards counted by state, as the portal's list does."""

import pytest
from guardian.shortcuts import assign_perm

from jobs.models import Job
from jobs.states import State
from tests.factories import JobFactory
from tests.jobs.test_cli import cli  # noqa: F401 (a fixture)
from tests.jobs.test_job_list_batches import batch


@pytest.fixture
def api(client, alice):
    client.force_login(alice)
    return lambda query="": client.get(f"/api/v1/jobs/{query}")


@pytest.mark.django_db
def test_folded_a_batch_is_one_row_with_its_shards_counted_and_its_state(api, alpha, alice):
    single = JobFactory(tenant=alpha, owner=alice)
    first = batch(alpha, alice, State.SUCCEEDED, State.RUNNING, State.QUEUED)

    jobs = api("?fold=1").json()["jobs"]

    assert [job["id"] for job in jobs] == [first.pk, single.pk]
    assert jobs[0]["shard_states"] == {"queued": 1, "running": 1, "succeeded": 1}
    assert jobs[0]["batch_state"] == "running"
    assert jobs[0]["shards_waiting"] == {"": 1}  # not decided by a cycle yet
    assert "shard_states" not in jobs[1]


@pytest.mark.django_db
def test_unfolded_the_list_gives_every_shard_as_before(api, alpha, alice):
    first = batch(alpha, alice, State.SUCCEEDED, State.RUNNING, State.QUEUED)

    for query in ("", "?fold=0"):
        jobs = api(query).json()["jobs"]
        assert {job["id"] for job in jobs} == set(first.batch().values_list("pk", flat=True))


@pytest.mark.django_db
def test_folded_a_state_or_held_asked_matches_any_of_a_batchs_shards(api, alpha, alice):
    first = batch(alpha, alice, State.RUNNING, State.QUEUED, State.QUEUED)
    Job.objects.filter(parent=first, shard_index=2).update(held="user")

    assert [j["id"] for j in api("?fold=1&state=queued").json()["jobs"]] == [first.pk]
    assert [j["id"] for j in api("?fold=1&held=1").json()["jobs"]] == [first.pk]
    assert api("?fold=1&state=failed").json()["jobs"] == []


@pytest.mark.django_db
def test_folded_a_shard_shared_alone_is_its_own_row(client, alpha, alice, charlie):
    first = batch(alpha, alice, State.SUCCEEDED, State.FAILED)
    shard = first.batch().get(shard_index=1)
    assign_perm("jobs.view_job", charlie, shard)
    client.force_login(charlie)

    jobs = client.get("/api/v1/jobs/?fold=1").json()["jobs"]

    assert [(job["id"], job["state"]) for job in jobs] == [(shard.pk, "failed")]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"), [("?fold=perhaps", "fold"), ("?fold=1&batch=7", "fold")]
)
def test_a_bad_fold_is_a_400_naming_it(api, query, field):
    answer = api(query)

    assert answer.status_code == 400 and field in answer.json()


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_a_batch_on_one_line_and_its_shards_when_asked(cli, alpha, alice):  # noqa: F811
    first = batch(alpha, alice, State.SUCCEEDED, State.RUNNING, State.QUEUED)

    folded = cli("list").stdout.splitlines()
    shards = cli("list", "--shards").stdout.splitlines()
    its_own = cli("list", "--batch", str(first.pk)).stdout.splitlines()

    assert len(folded) == 1
    assert folded[0].split()[:2] == [str(first.pk), "running"]
    assert folded[0].endswith(
        "embed  [3 shards: 1 queued, 1 running, 1 succeeded; queued as undecided 1]"
    )
    assert len(shards) == len(its_own) == 3
