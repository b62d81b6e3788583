"""Secrets given as files on the portal's secrets page: the checkbox "Give it to jobs as a
file" sets one, described by its help; its value typed, or read from a file chosen, line
breaks kept; the Kind column says "file"; one with a registry is named at the checkbox,
nothing written."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from quotas import tenant_secrets
from quotas.models import TenantSecret
from tests.jobs.test_batch_shard_limit_portal import portal_of

pytestmark = pytest.mark.django_db
KEY = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEv"}'
FILE = {"tenant": "alpha", "name": "GCP_KEY", "value": KEY, "as_file": "true"}


def test_it_sets_a_secret_as_a_file_with_the_checkbox(alice):
    portal = portal_of(alice)

    answer = portal.post("/secrets/", FILE)
    page = portal.get("/secrets/").text

    stored = TenantSecret.objects.get()
    assert answer.status_code == 302
    assert (stored.as_file, stored.value()) == (True, KEY)
    assert "private_key" not in page


def test_without_the_checkbox_a_file_set_again_becomes_a_variable(alice, alpha):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)

    portal_of(alice).post("/secrets/", {"tenant": "alpha", "name": "GCP_KEY", "value": "plain"})

    assert TenantSecret.objects.get().as_file is False


def test_a_member_reads_file_in_the_kind_column_beside_a_variable(alpha, bob):
    tenant_secrets.put(alpha, "GCP_KEY", KEY, as_file=True)
    tenant_secrets.put(alpha, "HF_TOKEN", "hf_the_value")

    page = portal_of(bob).get("/secrets/").text

    assert '<td class="kind">file</td>' in page
    assert '<td class="kind">variable</td>' in page


def test_the_checkbox_is_described_by_its_help(alice):
    page = portal_of(alice).get("/secrets/").text

    assert "Give it to jobs as a file" in page
    assert 'name="as_file" value="true" aria-describedby="as-file-help"' in page
    assert '<small id="as-file-help">' in page


def test_a_file_with_a_registry_is_named_at_the_checkbox_and_nothing_written(alice):
    credential = {"registry": "ghcr.io", "username": "acme-bot"}

    answer = portal_of(alice).post("/secrets/", {**FILE, **credential})

    assert answer.status_code == 400
    assert 'data-field="as_file"' in answer.text
    assert 'checked aria-invalid="true" aria-describedby="as-file-help id_as_file_error"' in (
        answer.text
    )
    assert "private_key" not in answer.text
    assert not TenantSecret.objects.exists()


KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n"


def test_a_value_read_from_a_chosen_file_keeps_its_line_breaks(alice):
    upload = SimpleUploadedFile("kubeconfig", KUBECONFIG.encode())
    form = {"tenant": "alpha", "name": "KUBECONFIG", "as_file": "true", "value_file": upload}

    answer = portal_of(alice).post("/secrets/", form)

    assert answer.status_code == 302
    assert TenantSecret.objects.get().value() == KUBECONFIG


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"value": "typed", "value_file": b"chosen"}, "value"),
        ({"value_file": b"\xff\xfe not text"}, "value_file"),
        ({"value_file": b"x" * (4 * 32 * 1024 + 1)}, "value_file"),
    ],
    ids=["both", "not-utf-8", "too-large"],
)
def test_a_file_refused_is_named_and_nothing_written(alice, form, field):
    if "value_file" in form:
        form = {**form, "value_file": SimpleUploadedFile("f", form["value_file"])}

    answer = portal_of(alice).post("/secrets/", {"tenant": "alpha", "name": "K", **form})

    assert answer.status_code == 400
    assert f'data-field="{field}"' in answer.text
    assert not TenantSecret.objects.exists()
