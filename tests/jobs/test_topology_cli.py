"""The command line's side of a training gang's topology domain: `submit --topology KEY`, and
`status` with the job's topology; a bad key is the API's refusal, naming the field."""

import json

import pytest

from jobs.models import Job
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_elastic_submission import BODY

pytestmark = pytest.mark.django_db


def test_submit_sends_its_topology_and_status_shows_it(mlsched, normal_priority):  # noqa: F811
    status, out, err = mlsched("submit", "-", "--topology", "rack", stdin=json.dumps(BODY))

    assert status == 0, err
    job = Job.objects.get(pk=int(out.split()[0]))
    assert job.topology == "rack"
    assert json.loads(mlsched("status", str(job.pk))[1])["topology"] == "rack"


def test_a_bad_key_is_refused_naming_the_field(mlsched, normal_priority):  # noqa: F811
    status, _, err = mlsched("submit", "-", "--topology", "Rack!", stdin=json.dumps(BODY))

    assert status != 0
    assert "topology" in err
    assert not Job.objects.exists()
