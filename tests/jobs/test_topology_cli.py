"""The command line's side of a training gang's topology domain: `submit --topology KEY`,
`status` with the job's topology, `efficiency` and `list` saying it; a bad key is the API's refusal,
naming the field. Run in this process: its HTTP requests are answered by the app itself."""

import json

import pytest

from jobs.models import Job
from tests.factories import JobFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_elastic_submission import BODY

pytestmark = pytest.mark.django_db


def test_submit_sends_its_topology_and_status_shows_it(mlsched, normal_priority):  # noqa: F811
    status, out, err = mlsched("submit", "-", "--topology", "rack", stdin=json.dumps(BODY))

    assert status == 0, err
    job = Job.objects.get(pk=int(out.split()[0]))
    assert job.topology == "rack"
    assert json.loads(mlsched("status", str(job.pk))[1])["topology"] == "rack"


def test_submit_topology_replaces_the_files_own(mlsched, normal_priority):  # noqa: F811
    spec = json.dumps({**BODY, "topology": "zone"})

    status, out, err = mlsched("submit", "-", "--topology", "nvlink", stdin=spec)

    assert status == 0, err
    assert Job.objects.get(pk=int(out.split()[0])).topology == "nvlink"


def test_a_bad_key_is_the_apis_refusal_naming_the_field(mlsched, normal_priority):  # noqa: F811
    status, _, err = mlsched("submit", "-", "--topology", "Rack!", stdin=json.dumps(BODY))

    assert status == 1 and "error 400" in err and "topology" in err
    assert not Job.objects.exists()


def test_efficiency_says_a_gangs_domain_when_it_asks_for_one(mlsched, alpha, alice):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, name="llama", workers=4, topology="rack",
                     cpu_milli=4000, memory_mb=8192)  # fmt: skip
    plain = JobFactory(tenant=alpha, owner=alice, workers=4)

    status, out, err = mlsched("efficiency", str(job.pk))

    assert status == 0, err
    assert out.splitlines()[0] == (
        f"job {job.pk} llama (queued): asked for 4 workers of 4 cores, 8192 MiB and 1 GPU each, "
        "all in one rack"
    )
    assert "all in one" not in mlsched("efficiency", str(plain.pk))[1]


def test_list_gives_a_gangs_domain_with_its_gpus_in_one_word(mlsched, alpha, alice):  # noqa: F811
    kept = JobFactory(tenant=alpha, owner=alice, name="kept", workers=4, gpus=8, topology="rack")
    loose = JobFactory(tenant=alpha, owner=alice, name="loose", workers=4, gpus=8)

    status, out, err = mlsched("list")

    assert status == 0, err
    rows = {int(row.split()[0]): [*row.split()[3:5], row.split()[6]] for row in out.splitlines()}
    assert rows[kept.pk] == ["alice", "4x8@rack", "kept"]
    assert rows[loose.pk] == ["alice", "4x8", "loose"]


def test_list_gives_a_cpu_only_gangs_workers_and_domain_in_one_word(mlsched, alpha, alice):  # noqa: F811
    kept = JobFactory(tenant=alpha, owner=alice, name="kept", workers=4, gpus=0, topology="rack")
    elastic = JobFactory(tenant=alpha, owner=alice, name="elastic", workers=4, min_workers=2,
                         gpus=0, topology="rack")  # fmt: skip
    loose = JobFactory(tenant=alpha, owner=alice, name="loose", workers=4, gpus=0)

    status, out, err = mlsched("list")

    assert status == 0, err
    rows = {int(row.split()[0]): [*row.split()[3:5], row.split()[6]] for row in out.splitlines()}
    assert rows[kept.pk] == ["alice", "4w@rack", "kept"]
    assert rows[elastic.pk] == ["alice", "2-4w@rack", "elastic"]
    assert rows[loose.pk] == ["alice", "none", "loose"]
