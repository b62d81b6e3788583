"""Tenants' data volumes: a job names them with the path its workers see each at, the
submission checks them, the scheduler places the job only on clusters that have them all, and
the agent is told where each is with the attempt."""

import pytest
from django.db import IntegrityError, transaction

from clusters.backends.base import KUBERNETES, SPEC_FIELDS
from jobs import cycle
from jobs.models import Attempt, Family, Job
from jobs.states import State
from quotas.models import TenantVolume
from tests.factories import ClusterFactory, JobFactory, NodeFactory, TenantVolumeFactory
from tests.jobs.test_elastic_submission import submit

pytestmark = pytest.mark.django_db
# An agent of the release before data volumes: it keeps every other field.
BEFORE_VOLUMES = sorted(set(SPEC_FIELDS) - {"volumes"})


def mount(name="imagenet", path="/data", **kw):
    return {"name": name, "path": path, **kw}


def heartbeat(agent) -> list[dict]:
    return agent.post("/api/v1/agent/east/heartbeat/", {"workers": []}, format="json").json()["run"]


# -- the submission -----------------------------------------------------------------------------


def test_a_job_mounting_its_teams_volume_stores_and_answers_it(alice, alpha, normal_priority):
    TenantVolumeFactory(tenant=alpha)

    response = submit(alice, volumes=[mount()])

    assert response.status_code == 201, response.content
    expected = [{"name": "imagenet", "path": "/data", "read_only": True}]
    assert response.json()["volumes"] == expected
    assert Job.objects.get().volumes == expected


@pytest.mark.parametrize(
    ("mounts", "says"),
    [
        ([mount(name="other")], "has no volume 'other'"),
        ([mount(read_only=False)], "read only"),
        ([mount(path="data")], "not an absolute path"),
        ([mount(path="/data/../etc")], "not a plain path"),
        ([mount(path="/")], "not a plain path"),
        ([mount(path="/var/run/mlsched/x")], "the platform keeps"),
        ([mount(path="/checkpoints")], "the platform keeps"),
        ([mount(path="/var/run")], "the platform keeps"),
        ([mount(), mount(path="/other")], "named twice"),
        ([mount(), mount(name="weights", path="/data/weights")], "inside '/data'"),
    ],
)
def test_a_mount_that_cannot_stand_is_a_400_naming_volumes(
    alice, alpha, normal_priority, mounts, says
):
    TenantVolumeFactory(tenant=alpha)
    TenantVolumeFactory(tenant=alpha, name="weights")

    response = submit(alice, volumes=mounts)

    assert response.status_code == 400
    assert says in str(response.json()["volumes"])
    assert not Job.objects.exists()


def test_another_teams_volume_is_not_for_its_jobs(alice, alpha, gamma, normal_priority):
    TenantVolumeFactory(tenant=gamma)

    response = submit(alice, volumes=[mount()])

    assert response.status_code == 400 and "has no volume 'imagenet'" in str(response.json())


def test_a_writable_volume_may_be_written_when_the_job_asks(alice, alpha, normal_priority):
    TenantVolumeFactory(tenant=alpha, writable=True)

    response = submit(alice, volumes=[mount(read_only=False)])

    assert response.status_code == 201, response.content
    assert Job.objects.get().volumes[0]["read_only"] is False


def test_a_volume_is_somewhere_in_the_database_too(alpha):
    with pytest.raises(IntegrityError), transaction.atomic():
        TenantVolume.objects.create(tenant=alpha, name="nowhere")


# -- where it runs ------------------------------------------------------------------------------


def placed_on(job) -> str:
    attempt = job.attempts.first()
    return attempt.cluster.name if attempt else "waiting"


def test_a_job_runs_only_on_the_clusters_that_have_its_volumes(alpha):
    here, there = ClusterFactory(name="here"), ClusterFactory(name="there")
    for cluster in (here, there):
        NodeFactory(cluster=cluster, name=f"{cluster.name}-0", gpu_count=8)
    TenantVolumeFactory(tenant=alpha, clusters=[there])
    jobs = [JobFactory(tenant=alpha, gpus=8, volumes=[mount()]) for _ in range(2)]
    plain = JobFactory(tenant=alpha, gpus=8)

    cycle.run_cycle()

    assert sorted(placed_on(job) for job in jobs) == ["there", "waiting"]
    assert placed_on(plain) == "here"


def test_a_volume_with_only_a_claim_is_on_kubernetes_clusters_alone(alpha):
    local = ClusterFactory(name="local")
    pods = ClusterFactory(name="pods", backend=KUBERNETES)
    for cluster in (local, pods):
        NodeFactory(cluster=cluster, name=f"{cluster.name}-0", gpu_count=8)
    TenantVolumeFactory(tenant=alpha, host_path="")
    jobs = [JobFactory(tenant=alpha, gpus=8, volumes=[mount()]) for _ in range(2)]

    cycle.run_cycle()

    assert sorted(placed_on(job) for job in jobs) == ["pods", "waiting"]


def test_a_job_whose_volume_was_deleted_waits_on_no_cluster(alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(tenant=alpha, gpus=8, volumes=[mount()])

    cycle.run_cycle()

    assert placed_on(job) == "waiting"


def test_a_job_with_volumes_runs_only_where_the_agent_keeps_them(alpha):
    before = ClusterFactory(name="before", agent_spec_fields=BEFORE_VOLUMES)
    now = ClusterFactory(name="now")
    for cluster in (before, now):
        NodeFactory(cluster=cluster, name=f"{cluster.name}-0", gpu_count=8)
    TenantVolumeFactory(tenant=alpha)
    jobs = [JobFactory(tenant=alpha, gpus=8, volumes=[mount()]) for _ in range(2)]

    cycle.run_cycle()

    assert sorted(placed_on(job) for job in jobs) == ["now", "waiting"]


# -- the agent ----------------------------------------------------------------------------------


def test_the_agent_is_told_where_each_volume_is(agent, east, alpha):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    TenantVolumeFactory(tenant=alpha)
    TenantVolumeFactory(tenant=alpha, name="out", claim="", host_path="/srv/out", writable=True)
    mounts = [mount(), mount("out", "/out", read_only=False)]
    JobFactory(tenant=alpha, family=Family.TRAINING, gpus=1, volumes=mounts)
    cycle.run_cycle()

    (spec,) = heartbeat(agent)

    assert spec["volumes"] == [
        {"name": "imagenet", "path": "/data", "read_only": True, "claim": "imagenet-pvc",
         "host_path": "/srv/data/imagenet"},
        {"name": "out", "path": "/out", "read_only": False, "claim": "",
         "host_path": "/srv/out"},
    ]  # fmt: skip


def test_a_volume_deleted_before_its_attempt_starts_fails_it_saying_which(agent, east, alpha):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    made = TenantVolumeFactory(tenant=alpha)
    job = JobFactory(tenant=alpha, family=Family.TRAINING, gpus=1, volumes=[mount()],
                     max_retries=3)  # fmt: skip
    cycle.run_cycle()
    made.delete()

    assert heartbeat(agent) == []

    attempt = job.attempts.get()
    job.refresh_from_db()
    assert (attempt.outcome, job.state) == (Attempt.Outcome.USER_ERROR, State.FAILED)
    assert "its team's volume 'imagenet' no longer exists" in attempt.reason


def test_waiting_for_a_cluster_with_its_volume_it_says_so(alpha, east):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    job = JobFactory(tenant=alpha, gpus=8, volumes=[mount()])

    cycle.run_cycle()

    job.refresh_from_db()
    assert job.pending_reason == "no_matching_cluster"
    assert "has every data volume it mounts" in job.pending_message
