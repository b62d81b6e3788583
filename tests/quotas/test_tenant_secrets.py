"""Tenants' secrets: sealed at rest, given to the agent with the attempts of the jobs that name
them, a job whose secret cannot be read failing before it runs, the values hidden in those
jobs' logs, and a secret that live jobs name kept from deletion."""

import io

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import override_settings

from clusters.backends import base
from jobs import cycle
from jobs.models import Attempt, Family, Job, LogChunk
from jobs.states import State
from quotas import secret_masking, tenant_secrets, vault
from quotas.models import TenantSecret
from tests.factories import JobFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db
TOKEN = "hf_abcdefghijklmnop"


def post(client, what, payload):
    return client.post(f"/api/v1/agent/east/{what}/", payload, format="json")


@pytest.fixture
def placed(east, alpha):
    """A job of alpha naming its secret HF_TOKEN, placed on east."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    tenant_secrets.put(alpha, "HF_TOKEN", TOKEN)
    job = JobFactory(tenant=alpha, family=Family.TRAINING, gpus=1, secrets=["HF_TOKEN"])
    cycle.run_cycle()
    return job


def test_a_secret_is_kept_sealed_and_opens_to_its_value(alpha):
    secret, created = tenant_secrets.put(alpha, "WANDB_API_KEY", "w-123456")

    stored = TenantSecret.objects.get(pk=secret.pk)
    assert created and "w-123456" not in stored.sealed
    assert stored.value() == "w-123456"


def test_setting_a_secret_again_replaces_its_value(alpha):
    tenant_secrets.put(alpha, "WANDB_API_KEY", "first-value")

    secret, created = tenant_secrets.put(alpha, "WANDB_API_KEY", "second-value")

    assert not created and secret.value() == "second-value"
    assert TenantSecret.objects.filter(tenant=alpha).count() == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [("9LIVES", "v"), ("HAS-DASH", "v"), ("RANK", "v"), ("MLSCHED_JOB_ID", "v"),
     ("mlsched_x", "v"), ("OK", ""), ("OK", "a\x00b"), ("OK", "x" * (32 * 1024 + 1))],
)  # fmt: skip
def test_a_bad_name_or_value_is_refused_and_nothing_written(alpha, name, value):
    with pytest.raises(ValidationError):
        tenant_secrets.put(alpha, name, value)

    assert not TenantSecret.objects.exists()


def test_every_variable_the_platform_sets_a_worker_is_refused_as_a_name(alpha):
    worker = base.WorkerSpec(rank=0, node="n0", gpu_indices=(0,))
    spec = base.AttemptSpec(attempt_id=1, job_id=1, number=2, tenant="alpha", name="n",
                            image="i", command=(), env={}, checkpoint_dir="c", max_runtime_s=9,
                            workers=(worker,))  # fmt: skip
    names = set(base.worker_env(spec, spec.workers[0], "127.0.0.1", "/c"))

    refused = set()
    for name in names | {"PATH", "HOME", "LANG", "PYTHONUNBUFFERED"}:
        with pytest.raises(ValidationError):
            tenant_secrets.put(alpha, name, "value")
        refused.add(name)

    assert refused >= names and not TenantSecret.objects.exists()


def test_another_key_first_still_opens_secrets_sealed_with_the_old_and_reseals_them(alpha):
    with override_settings(MLSCHED_SECRETS_KEYS=["old-key"]):
        secret, _ = tenant_secrets.put(alpha, "TOKEN", "the-value")
    with override_settings(MLSCHED_SECRETS_KEYS=["new-key", "old-key"]):
        assert secret.value() == "the-value"
        resealed = vault.reseal(secret.sealed)
    with override_settings(MLSCHED_SECRETS_KEYS=["new-key"]):
        assert vault.unseal(resealed) == "the-value"
        with pytest.raises(vault.Unreadable):
            secret.value()


def test_the_agent_is_given_the_secrets_of_the_job_with_its_attempt(agent, placed):
    (spec,) = post(agent, "heartbeat", {"workers": []}).json()["run"]

    assert spec["secrets"] == {"HF_TOKEN": TOKEN}
    assert "HF_TOKEN" not in spec["env"]


def test_a_replaced_secret_gives_a_job_placed_after_it_the_new_value(agent, placed, alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_replaced_value")

    (spec,) = post(agent, "heartbeat", {"workers": []}).json()["run"]

    assert spec["secrets"] == {"HF_TOKEN": "hf_replaced_value"}


def test_a_job_whose_secret_no_key_opens_fails_before_it_runs_saying_which(agent, placed):
    with override_settings(MLSCHED_SECRETS_KEYS=["another-key"]):
        state = post(agent, "heartbeat", {"workers": []}).json()

    attempt = placed.attempts.get()
    assert state["run"] == []
    assert (attempt.outcome, Job.objects.get(pk=placed.pk).state) == (
        Attempt.Outcome.USER_ERROR,
        State.FAILED,
    )
    assert "'HF_TOKEN' cannot be read" in attempt.reason
    assert not attempt.allocations.filter(active=True).exists()


def test_a_job_that_retries_its_own_errors_still_fails_at_once_when_its_secret_is_gone(
    agent, placed
):
    Job.objects.filter(pk=placed.pk).update(retry_user_errors=True, max_retries=3)
    TenantSecret.objects.all().delete()

    post(agent, "heartbeat", {"workers": []})

    job = Job.objects.get(pk=placed.pk)
    assert (job.state, job.retries_used) == (State.FAILED, 0)
    assert "'HF_TOKEN' is no longer set" in job.attempts.get().reason


def test_a_job_whose_secret_is_gone_fails_before_it_runs(agent, placed):
    TenantSecret.objects.all().delete()  # not through the verb, which refuses while it is named

    post(agent, "heartbeat", {"workers": []})

    attempt = placed.attempts.get()
    assert attempt.outcome == Attempt.Outcome.USER_ERROR
    assert "'HF_TOKEN' is no longer set" in attempt.reason


def test_the_secret_is_masked_in_the_log_of_a_job_that_names_it(agent, placed, alpha):
    other = JobFactory(tenant=alpha, gpus=1)  # names no secret: its log is left as it is
    cycle.run_cycle()
    mine, theirs = placed.attempts.get(), other.attempts.get()
    lines = [
        {"attempt_id": mine.pk, "rank": 0, "seq": 0, "stream": "stdout",
         "text": f"token={TOKEN} twice {TOKEN}"},
        {"attempt_id": theirs.pk, "rank": 0, "seq": 0, "stream": "stdout", "text": TOKEN},
    ]  # fmt: skip

    post(agent, "logs", {"lines": lines})

    assert LogChunk.objects.get(attempt=mine).text == "token=*** twice ***"
    assert LogChunk.objects.get(attempt=theirs).text == TOKEN


def test_each_long_enough_line_of_a_value_is_masked_and_a_short_one_left(alpha, placed):
    tenant_secrets.put(alpha, "HF_TOKEN", "-----BEGIN KEY-----\nab\nsecretline\n")

    (hidden,) = secret_masking.masks([placed.attempts.get().pk]).values()

    assert {"-----BEGIN KEY-----", "secretline"} <= set(hidden.texts)
    assert "ab" not in hidden.texts
    assert secret_masking.mask("ab secretline", hidden) == "ab ***"


def test_a_secret_named_by_a_job_not_yet_ended_cannot_be_deleted(alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", TOKEN)
    job = JobFactory(tenant=alpha, secrets=["HF_TOKEN"])

    with pytest.raises(tenant_secrets.InUse) as refused:
        tenant_secrets.delete(alpha, "HF_TOKEN")
    Job.objects.filter(pk=job.pk).update(state=State.CANCELED)
    deleted = tenant_secrets.delete(alpha, "HF_TOKEN")

    assert refused.value.job_ids == [job.pk] and str(job.pk) in str(refused.value)
    assert deleted and not TenantSecret.objects.exists()


def test_another_tenants_job_naming_the_same_name_does_not_keep_it(alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", TOKEN)
    JobFactory(tenant=TenantFactory(slug="beta"), secrets=["HF_TOKEN"])

    assert tenant_secrets.delete(alpha, "HF_TOKEN")


def test_reseal_seals_every_secret_under_the_first_key_and_names_those_none_opens(alpha):
    with override_settings(MLSCHED_SECRETS_KEYS=["old-key"]):
        tenant_secrets.put(alpha, "TOKEN", "the-value")
    with override_settings(MLSCHED_SECRETS_KEYS=["lost-key"]):
        tenant_secrets.put(alpha, "LOST", "gone-value")
    out, err = io.StringIO(), io.StringIO()

    with override_settings(MLSCHED_SECRETS_KEYS=["new-key", "old-key"]):
        call_command("reseal_secrets", stdout=out, stderr=err)

    with override_settings(MLSCHED_SECRETS_KEYS=["new-key"]):
        assert TenantSecret.objects.get(name="TOKEN").value() == "the-value"
    assert "resealed 1 secret" in out.getvalue()
    assert "alpha/LOST" in err.getvalue()
