"""A put that names the kind its caller read (`replaces`) sets the secret only if it is still
of that kind: one changed meanwhile by another owner is a 409 naming `replaces` and the kind
stored, nothing written. The list gives each secret's kind."""

import pytest

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.jobs.test_api import client_for

pytestmark = pytest.mark.django_db
URL = "/api/v1/tenants/alpha/secrets/"


def put(user, name: str, **body):
    return client_for(user).put(f"{URL}{name}/", {"value": "new-value-1", **body}, format="json")


def test_the_list_gives_each_secrets_kind(alice, alpha):
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_value_1")
    tenant_secrets.put(alpha, "CERT", "pem-body-1", as_file=True)
    tenant_secrets.put(alpha, "GHCR", "ghp_token_1", registry="ghcr.io", username="bot")

    listed = client_for(alice).get(URL).json()["secrets"]

    assert {s["name"]: s["kind"] for s in listed} == {
        "HF_TOKEN": "variable", "CERT": "file", "GHCR": "credential"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("stored", "read"),
    [({}, "file"), ({"as_file": True}, "variable"), ({"registry": "ghcr.io"}, "variable"),
     (None, "variable")],
)  # fmt: skip
def test_a_secret_changed_since_it_was_read_is_a_409_and_nothing_is_written(
    alice, alpha, stored, read
):
    if stored is not None:
        tenant_secrets.put(alpha, "TOKEN", "old-value-1", username="bot" * ("registry" in stored),
                           **stored)  # fmt: skip
    before = list(TenantSecret.objects.values_list("sealed", "registry", "as_file"))

    refused = put(alice, "TOKEN", replaces=read)

    assert refused.status_code == 409
    kind = "none" if stored is None else tenant_secrets.kind_of(TenantSecret.objects.get())
    assert refused.json()["kind"] == kind and "changed meanwhile" in refused.json()["replaces"][0]
    assert list(TenantSecret.objects.values_list("sealed", "registry", "as_file")) == before


@pytest.mark.parametrize(
    ("stored", "read", "code"),
    [(None, "none", 201), ({}, "variable", 200), ({"as_file": True}, "file", 200)],
)  # fmt: skip
def test_a_secret_still_of_the_kind_read_is_set(alice, alpha, stored, read, code):
    if stored is not None:
        tenant_secrets.put(alpha, "TOKEN", "old-value-1", **stored)

    answer = put(alice, "TOKEN", replaces=read)

    assert answer.status_code == code
    assert TenantSecret.objects.get().value() == "new-value-1"


def test_a_kind_that_is_none_of_them_is_a_400_naming_replaces(alice):
    answer = put(alice, "TOKEN", replaces="password")

    assert answer.status_code == 400 and "replaces" in answer.json()
    assert not TenantSecret.objects.exists()
