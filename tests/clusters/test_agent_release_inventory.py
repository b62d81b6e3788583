"""An agent's inventory, sent as it starts, names the run spec's fields it keeps as its
heartbeats do: an agent replaced by an older release, whose inventory names none, is judged as
one from that report on, not by what the agent before it said."""

import pytest

from clusters.agent.client import ControlPlane
from clusters.backends.base import SPEC_FIELDS
from clusters.models import Cluster
from jobs import cycle
from jobs.states import State
from quotas import tenant_secrets
from tests.factories import ClusterFactory, JobFactory

pytestmark = pytest.mark.django_db
OLD_FIELDS = sorted(set(SPEC_FIELDS) - {"secrets", "pull_credential"})
NODE = {"name": "east-0", "cpu_milli": 64000, "memory_mb": 512000, "gpu_type": "A100",
        "gpu_count": 8}  # fmt: skip


def report_inventory(agent, **payload):
    answer = agent.post("/api/v1/agent/east/inventory/", {"nodes": [NODE], **payload},
                        format="json")  # fmt: skip
    assert answer.status_code == 200, answer.content
    return answer.json()


def stored(cluster) -> list | None:
    return Cluster.objects.values_list("agent_spec_fields", flat=True).get(pk=cluster.pk)


def test_an_inventory_records_the_fields_its_agent_keeps(agent, east):
    report_inventory(agent, spec_fields=OLD_FIELDS + ["secrets", "secrets"])

    assert stored(east) == sorted(OLD_FIELDS + ["secrets"])


@pytest.mark.parametrize("said", [{}, {"spec_fields": None}], ids=["absent", "null"])
def test_an_inventory_naming_none_judges_the_agent_an_older_release(agent, east, said):
    assert stored(east) == list(SPEC_FIELDS)  # what the agent before it said

    report_inventory(agent, **said)

    assert stored(east) is None


@pytest.mark.parametrize(
    "odd",
    ["secrets", ["Secrets"], [5], ["x" * 65], ["a"] * 201],
    ids=["text", "capitals", "number", "too-long", "too-many"],
)
def test_an_inventory_with_odd_ones_keeps_what_was_said(agent, east, odd):
    report_inventory(agent, spec_fields=OLD_FIELDS)

    report_inventory(agent, spec_fields=odd)

    assert stored(east) == OLD_FIELDS


def test_an_older_agents_heartbeats_after_its_inventory_leave_it_judged_as_one(agent, east):
    report_inventory(agent)

    beat = agent.post("/api/v1/agent/east/heartbeat/", {"workers": []}, format="json")

    assert beat.status_code == 200
    assert stored(east) is None


def test_once_an_older_agent_reports_its_inventory_a_job_naming_secrets_waits(agent, east, alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_abcdefgh")
    job = JobFactory(tenant=alpha, gpus=1, secrets=["HF_TOKEN"])

    report_inventory(agent)  # an agent of a release before spec_fields took over the cluster
    cycle.run_cycle()

    job.refresh_from_db()
    assert (job.state, job.pending_reason) == (State.QUEUED, "agent_release")
    assert not job.attempts.exists()


@pytest.mark.django_db(transaction=True)
def test_the_agents_own_client_names_every_field_of_its_run_spec_in_its_inventory(live_server):
    east = ClusterFactory(name="east", agent_spec_fields=None)

    ControlPlane(live_server.url, "east", east.rotate_token()).inventory([])

    assert stored(east) == sorted(SPEC_FIELDS)
