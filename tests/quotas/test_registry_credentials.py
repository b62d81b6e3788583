"""Tenants' registry credentials: a secret with a registry is the pull credential of the
tenant's images there. It is checked as it is set, given to the agent with each attempt of a
job whose image comes from that registry, never named by a job nor given to one as a
variable."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.test import override_settings

from jobs import cycle
from jobs.models import Attempt, Family
from quotas import tenant_secrets
from quotas.models import TenantSecret, image_registry
from tests.factories import JobFactory, NodeFactory, TenantFactory
from tests.jobs.test_api import client_for, normal_priority, submit  # noqa: F401

pytestmark = pytest.mark.django_db
TOKEN = "ghp_0123456789abcdefghij"
URL = "/api/v1/tenants/alpha/secrets/"


def heartbeat(agent) -> list[dict]:
    return agent.post("/api/v1/agent/east/heartbeat/", {"workers": []}, format="json").json()["run"]


def placed(east, tenant, *images):
    """Jobs of the tenant, one per image, placed on east."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    jobs = [JobFactory(tenant=tenant, family=Family.TRAINING, gpus=1, image=i) for i in images]
    cycle.run_cycle()
    return jobs


@pytest.mark.parametrize(
    ("image", "registry"),
    [("pytorch/pytorch:2.4", "docker.io"), ("ubuntu", "docker.io"),
     ("ghcr.io/acme/train:1", "ghcr.io"), ("GHCR.io/acme/train", "ghcr.io"),
     ("registry.example.com:5000/x/y@sha256:ab", "registry.example.com:5000"),
     ("localhost/x", "localhost"), ("index.docker.io/library/ubuntu", "docker.io"),
     ("acme/train:1", "docker.io")],
)  # fmt: skip
def test_an_images_registry_is_read_as_docker_reads_its_reference(image, registry):
    assert image_registry(image) == registry


def test_a_credential_is_kept_sealed_with_its_registry_and_user(alpha):
    secret, created = tenant_secrets.put(
        alpha, "GHCR", TOKEN, registry="GHCR.IO", username="acme-bot"
    )

    stored = TenantSecret.objects.get()
    assert created and (stored.registry, stored.username) == ("ghcr.io", "acme-bot")
    assert TOKEN not in stored.sealed and stored.value() == TOKEN


def test_docker_hubs_other_names_are_written_docker_io(alpha):
    tenant_secrets.put(alpha, "HUB", TOKEN, registry="index.docker.io", username="acme")

    assert TenantSecret.objects.get().registry == "docker.io"


@pytest.mark.parametrize(
    ("registry", "username", "field"),
    [("ghcr", "bot", "registry"), ("https://ghcr.io", "bot", "registry"),
     ("ghcr.io/acme", "bot", "registry"), ("ghcr.io", "", "username"),
     ("ghcr.io", "bot:x", "username"), ("ghcr.io", "b\nt", "username"),
     ("ghcr.io", "bot ", "username"),
     ("", "bot", "username"), (5, "bot", "registry"), ("ghcr.io", ["bot"], "username")],
)  # fmt: skip
def test_a_bad_registry_or_username_is_refused_by_field_and_nothing_written(
    alpha, registry, username, field
):
    with pytest.raises(ValidationError) as refused:
        tenant_secrets.put(alpha, "PULL", TOKEN, registry=registry, username=username)

    assert list(refused.value.message_dict) == [field]
    assert not TenantSecret.objects.exists()


def test_a_second_credential_for_the_same_registry_is_refused(alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")

    with pytest.raises(ValidationError) as refused:
        tenant_secrets.put(alpha, "GHCR_2", "other-token", registry="ghcr.io", username="bot2")

    assert "is the secret 'GHCR'" in refused.value.message_dict["registry"][0]
    assert list(TenantSecret.objects.values_list("name", flat=True)) == ["GHCR"]


def test_the_database_holds_one_credential_a_registry_and_one_user_each(alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")
    twin = TenantSecret(tenant=alpha, name="OTHER", registry="ghcr.io", username="x", sealed="s")
    userless = TenantSecret(tenant=alpha, name="BARE", registry="quay.io", sealed="s")

    for row in (twin, userless):
        with pytest.raises(IntegrityError), transaction.atomic():
            row.save()


def test_two_tenants_each_have_their_credential_for_one_registry(alpha):
    beta = TenantFactory(slug="beta")

    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="alpha-bot")
    tenant_secrets.put(beta, "GHCR", "beta-token", registry="ghcr.io", username="beta-bot")

    assert TenantSecret.objects.filter(registry="ghcr.io").count() == 2


def test_a_variable_a_live_job_names_cannot_become_a_credential(alpha):
    tenant_secrets.put(alpha, "TOKEN", TOKEN)
    job = JobFactory(tenant=alpha, secrets=["TOKEN"])

    with pytest.raises(ValidationError) as refused:
        tenant_secrets.put(alpha, "TOKEN", TOKEN, registry="ghcr.io", username="bot")

    assert str(job.pk) in refused.value.message_dict["registry"][0]
    assert TenantSecret.objects.get().registry == ""


def test_putting_it_again_without_a_registry_makes_it_a_variable(alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")

    tenant_secrets.put(alpha, "GHCR", TOKEN)

    assert TenantSecret.objects.values_list("registry", "username").get() == ("", "")


def test_the_api_sets_a_credential_and_lists_its_registry_and_user(alice, bob):
    body = {"value": TOKEN, "registry": "ghcr.io", "username": "acme-bot"}

    created = client_for(alice).put(f"{URL}GHCR/", body, format="json")
    listed = client_for(bob).get(URL).json()["secrets"]

    assert created.status_code == 201
    assert (created.json()["registry"], created.json()["username"]) == ("ghcr.io", "acme-bot")
    assert [(s["name"], s["registry"], s["username"]) for s in listed] == [
        ("GHCR", "ghcr.io", "acme-bot")
    ]
    assert TOKEN not in str(listed)


def test_the_api_lists_a_variable_with_no_registry(alice):
    client_for(alice).put(f"{URL}HF_TOKEN/", {"value": TOKEN}, format="json")

    (listed,) = client_for(alice).get(URL).json()["secrets"]

    assert (listed["registry"], listed["username"]) == (None, None)


@pytest.mark.parametrize(
    ("body", "field"),
    [({"value": TOKEN, "registry": "not a host", "username": "bot"}, "registry"),
     ({"value": TOKEN, "registry": "ghcr.io"}, "username"),
     ({"value": TOKEN, "registry": {"a": 1}, "username": "bot"}, "registry"),
     ({"value": TOKEN, "username": "bot"}, "username")],
)  # fmt: skip
def test_the_api_answers_a_bad_credential_with_a_400_naming_the_field(alice, body, field):
    answer = client_for(alice).put(f"{URL}GHCR/", body, format="json")

    assert answer.status_code == 400 and field in answer.json()
    assert not TenantSecret.objects.exists()


def test_a_submission_naming_a_credential_as_a_variable_is_a_400_on_secrets(alice, alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")

    answer = submit(alice, image="ghcr.io/a/b", secrets=["GHCR"])

    assert answer.status_code == 400
    assert "pull credential for ghcr.io" in str(answer.json()["secrets"])
    assert not alpha.jobs.exists()


def test_the_agent_is_given_the_credential_of_the_registry_of_the_jobs_image(agent, east, alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="acme-bot")
    tenant_secrets.put(alpha, "HUB", "hub-token", registry="docker.io", username="acme")
    ghcr, hub, quay = placed(east, alpha, "ghcr.io/acme/t:1", "acme/t:1", "quay.io/acme/t")

    specs = {spec["job_id"]: spec for spec in heartbeat(agent)}

    assert specs[ghcr.pk]["pull_credential"] == {
        "registry": "ghcr.io", "username": "acme-bot", "password": TOKEN
    }  # fmt: skip
    assert specs[hub.pk]["pull_credential"]["password"] == "hub-token"
    assert specs[quay.pk]["pull_credential"] == {}
    assert all(
        "GHCR" not in spec["secrets"] and "GHCR" not in spec["env"] for spec in specs.values()
    )


def test_another_tenants_credential_is_not_given_with_a_job(agent, east, alpha):
    beta = TenantFactory(slug="beta")
    tenant_secrets.put(beta, "GHCR", TOKEN, registry="ghcr.io", username="beta-bot")
    (job,) = placed(east, alpha, "ghcr.io/beta/private:1")

    (spec,) = heartbeat(agent)

    assert spec["job_id"] == job.pk and spec["pull_credential"] == {}


def test_a_job_whose_credential_no_key_opens_fails_before_it_runs_saying_which(agent, east, alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")
    (job,) = placed(east, alpha, "ghcr.io/acme/t:1")

    with override_settings(MLSCHED_SECRETS_KEYS=["another-key"]):
        assert heartbeat(agent) == []

    attempt = job.attempts.get()
    assert attempt.outcome == Attempt.Outcome.USER_ERROR
    assert "'GHCR' cannot be read" in attempt.reason


def test_a_credential_may_be_deleted_while_jobs_pulling_from_it_wait(alpha):
    tenant_secrets.put(alpha, "GHCR", TOKEN, registry="ghcr.io", username="bot")
    JobFactory(tenant=alpha, image="ghcr.io/acme/t:1")

    assert tenant_secrets.delete(alpha, "GHCR")
    assert not TenantSecret.objects.exists()
