"""Agents of different releases: each heartbeat names the run spec's fields the agent keeps,
and work that needs a field an agent would leave out (a job's secrets; its team's registry
credential, on Kubernetes) is never given to that agent: it runs on a cluster whose agent
keeps it, or waits, saying why."""

import pytest

from clusters.agent.client import ControlPlane
from clusters.backends.base import SPEC_FIELDS
from clusters.models import Cluster
from jobs import cycle
from jobs.models import Attempt, Family
from jobs.states import State
from quotas import tenant_secrets
from tests.factories import ClusterFactory, JobFactory, NodeFactory, UserFactory

pytestmark = pytest.mark.django_db
OLD_FIELDS = sorted(set(SPEC_FIELDS) - {"secrets", "pull_credential"})


def beat(agent, **payload):
    answer = agent.post("/api/v1/agent/east/heartbeat/", {"workers": [], **payload}, format="json")
    assert answer.status_code == 200
    return answer.json()


def stored(cluster) -> list | None:
    return Cluster.objects.values_list("agent_spec_fields", flat=True).get(pk=cluster.pk)


def test_a_heartbeat_records_the_fields_its_agent_keeps(agent, east):
    beat(agent, spec_fields=OLD_FIELDS + ["secrets", "secrets"])

    assert stored(east) == sorted(OLD_FIELDS + ["secrets"])


@pytest.mark.parametrize(
    "odd", [None, "secrets", ["Secrets"], [5], ["x" * 65], ["a"] * 201], ids=str
)
def test_a_heartbeat_without_them_or_with_odd_ones_keeps_what_was_said(agent, east, odd):
    beat(agent, spec_fields=OLD_FIELDS)

    beat(agent, **({} if odd is None else {"spec_fields": odd}))

    assert stored(east) == OLD_FIELDS


@pytest.mark.django_db(transaction=True)
def test_the_agents_own_client_names_every_field_of_its_run_spec(live_server):
    east = ClusterFactory(name="east", agent_spec_fields=None)

    ControlPlane(live_server.url, "east", east.rotate_token()).heartbeat([])

    assert stored(east) == sorted(SPEC_FIELDS)


@pytest.fixture
def clusters():
    """An old agent's cluster (it never named its fields) and a current one, 8 GPUs each."""
    old = ClusterFactory(name="old", agent_spec_fields=None)
    new = ClusterFactory(name="new")
    for cluster in (old, new):
        NodeFactory(cluster=cluster, name=f"{cluster.name}-0", gpu_count=8)
    return old, new


def placed_on(job) -> str | None:
    job.refresh_from_db()
    attempt = job.attempts.first()
    return attempt.cluster.name if attempt else None


def test_a_job_naming_secrets_runs_only_where_the_agent_keeps_them(alpha, clusters):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_abcdefgh")
    jobs = [JobFactory(tenant=alpha, gpus=8, secrets=["HF_TOKEN"]) for _ in range(2)]

    cycle.run_cycle()

    # The old cluster's 8 GPUs stay free: the second job waits for the new one's.
    assert sorted(placed_on(job) or "waiting" for job in jobs) == ["new", "waiting"]


def test_a_job_naming_no_secrets_runs_on_an_old_agents_cluster(alpha, clusters):
    jobs = [JobFactory(tenant=alpha, gpus=8) for _ in range(2)]

    cycle.run_cycle()

    assert sorted(placed_on(job) for job in jobs) == ["new", "old"]


def test_with_only_old_agents_a_job_naming_secrets_waits_saying_why(alpha):
    NodeFactory(cluster=ClusterFactory(name="old", agent_spec_fields=OLD_FIELDS), gpu_count=8)
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_abcdefgh")
    job = JobFactory(tenant=alpha, gpus=1, secrets=["HF_TOKEN"])

    cycle.run_cycle()

    job.refresh_from_db()
    assert (job.state, job.pending_reason) == (State.QUEUED, "agent_release")
    assert "upgraded" in job.pending_message


@pytest.mark.parametrize(("backend", "runs"), [("kubernetes", False), ("local", True)])
def test_an_old_agent_gets_a_job_pulled_with_its_teams_credential_only_if_it_pulls_nothing(
    alpha, backend, runs
):
    old = ClusterFactory(name="old", backend=backend, agent_spec_fields=None)
    NodeFactory(cluster=old, gpu_count=8)
    tenant_secrets.put(alpha, "GHCR", "ghp_abcdefgh", registry="ghcr.io", username="bot")
    private = JobFactory(tenant=alpha, gpus=1, image="ghcr.io/acme/train:1")
    public = JobFactory(tenant=alpha, gpus=1, image="pytorch/pytorch:2.4")

    cycle.run_cycle()

    assert (placed_on(private) == "old", placed_on(public)) == (runs, "old")


def test_an_attempt_placed_before_its_agent_changed_release_runs_again_elsewhere(
    agent, east, alpha
):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_abcdefgh")
    job = JobFactory(tenant=alpha, family=Family.TRAINING, gpus=1, secrets=["HF_TOKEN"])
    cycle.run_cycle()

    answer = beat(agent, spec_fields=OLD_FIELDS)  # an older agent took over the cluster

    attempt = job.attempts.get()
    job.refresh_from_db()
    assert answer["run"] == []
    assert (attempt.outcome, job.state) == (Attempt.Outcome.INFRA_ERROR, State.QUEUED)
    assert "would leave out the run spec's secrets" in attempt.reason


@pytest.mark.parametrize(
    ("fields", "said"),
    [(None, "has not said"), (OLD_FIELDS, "Leaves out pull_credential, secrets"),
     (list(SPEC_FIELDS), "Keeps every field")],
)  # fmt: skip
def test_the_admins_cluster_page_says_what_its_agent_leaves_out(client, fields, said):
    cluster = ClusterFactory(name="old", agent_spec_fields=fields)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    page = client.get(f"/admin/clusters/cluster/{cluster.pk}/change/")

    assert page.status_code == 200 and said in page.text
