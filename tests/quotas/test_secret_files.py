"""Secrets given to jobs as files (a service account's key, a kubeconfig): set as such, handed
to the agent with each attempt apart from the variables, and kept off the clusters whose
agents would leave them out."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from clusters.backends.base import SPEC_FIELDS
from jobs import cycle
from jobs.models import Attempt, Family
from jobs.states import State
from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.factories import ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
KEY = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv"}\n'
# An agent of the release before secret files: it keeps every other field.
BEFORE_FILES = sorted(set(SPEC_FIELDS) - {"secret_files"})


def heartbeat(agent) -> list[dict]:
    return agent.post("/api/v1/agent/east/heartbeat/", {"workers": []}, format="json").json()["run"]


def test_a_secret_set_as_a_file_is_kept_sealed_and_says_so(alpha):
    secret, created = tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    stored = TenantSecret.objects.get()
    assert created and stored.as_file
    assert "private_key" not in stored.sealed and stored.value() == KEY


def test_set_again_without_it_a_file_becomes_a_variable(alpha):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    tenant_secrets.put(alpha, "GCP_KEY", "plain")

    assert TenantSecret.objects.get().as_file is False


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"as_file": "yes"}, "as_file"),
     ({"as_file": True, "registry": "ghcr.io", "username": "bot"}, "as_file")],
)  # fmt: skip
def test_a_file_is_true_or_false_and_never_a_registry_credential(alpha, fields, field):
    with pytest.raises(ValidationError) as refused:
        tenant_secrets.put(alpha, "GCP_KEY", KEY, **fields)

    assert field in refused.value.message_dict
    assert not TenantSecret.objects.exists()


def test_the_database_refuses_a_credential_given_as_a_file(alpha):
    secret = TenantSecret(tenant=alpha, name="GHCR", registry="ghcr.io", username="bot")
    secret.as_file = True
    secret.set_value("token")

    with pytest.raises(IntegrityError), transaction.atomic():
        secret.save()


def test_a_job_gets_its_files_apart_from_its_variables(agent, east, alpha):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_abcdefgh")
    JobFactory(tenant=alpha, family=Family.TRAINING, gpus=1, secrets=["GCP_KEY", "HF_TOKEN"])
    cycle.run_cycle()

    (spec,) = heartbeat(agent)

    assert spec["secret_files"] == {"GCP_KEY": KEY}
    assert spec["secrets"] == {"HF_TOKEN": "hf_abcdefgh"}


def test_a_job_naming_a_file_runs_only_where_the_agent_keeps_files(alpha):
    clusters = {
        "before": ClusterFactory(name="before", agent_spec_fields=BEFORE_FILES),
        "now": ClusterFactory(name="now"),
    }
    for cluster in clusters.values():
        NodeFactory(cluster=cluster, name=f"{cluster.name}-0", gpu_count=8)
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_abcdefgh")
    files = [JobFactory(tenant=alpha, gpus=8, secrets=["GCP_KEY"]) for _ in range(2)]
    variable = JobFactory(tenant=alpha, gpus=8, secrets=["HF_TOKEN"])

    cycle.run_cycle()

    where = {}
    for job in [*files, variable]:
        attempt = job.attempts.first()
        where[job.pk] = attempt.cluster.name if attempt else "waiting"
    assert sorted(where[job.pk] for job in files) == ["now", "waiting"]
    assert where[variable.pk] == "before"


def test_an_attempt_given_to_an_agent_that_would_leave_its_files_out_runs_again(agent, east, alpha):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)
    job = JobFactory(tenant=alpha, family=Family.TRAINING, gpus=1, secrets=["GCP_KEY"])
    cycle.run_cycle()

    answer = agent.post("/api/v1/agent/east/heartbeat/", {"workers": [],
                        "spec_fields": BEFORE_FILES}, format="json").json()  # fmt: skip

    attempt = job.attempts.get()
    job.refresh_from_db()
    assert answer["run"] == []
    assert (attempt.outcome, job.state) == (Attempt.Outcome.INFRA_ERROR, State.QUEUED)
    assert "would leave out the run spec's secret_files" in attempt.reason
