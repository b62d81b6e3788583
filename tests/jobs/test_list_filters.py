"""The job lists' parameters read alike by the API and the portal (jobs/listing.py): a team,
a part of the name and the reader's own jobs (Slurm's squeue -A, -n and --me), and every
parameter at fault named at once."""

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import JobFactory, MembershipFactory, TenantFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs(alpha, alice, bob):
    beta = TenantFactory(name="Beta", slug="beta")
    MembershipFactory(tenant=beta, user=alice)
    return {
        "alice-train": JobFactory(tenant=alpha, owner=alice, name="llama-train"),
        "bob-train": JobFactory(tenant=alpha, owner=bob, name="LLAMA-train-2"),
        "alice-eval": JobFactory(tenant=alpha, owner=alice, name="mmlu-eval"),
        "beta-eval": JobFactory(tenant=beta, owner=alice, name="mmlu-eval"),
    }


def api_ids(user, query: str) -> list[int]:
    client = APIClient()
    client.force_authenticate(user)
    response = client.get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 200, response.json()
    return [job["id"] for job in response.json()["jobs"]]


def portal_ids(user, query: str) -> list[int]:
    client = Client()
    client.force_login(user)
    page = client.get(f"/?{query}").content.decode()
    # Each row's id: its first cell, or its second after the tick of a job one may change.
    row = r"<tr class=[^>]*>\s*(?:<td>(?:<input [^>]*>)?</td>)?<td>(\d+)</td>"
    return [int(n) for n in re.findall(row, page)]


def ids(jobs, *names) -> list[int]:
    return sorted((jobs[name].pk for name in names), reverse=True)


@pytest.mark.parametrize("read", [api_ids, portal_ids])
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("tenant=beta", ["beta-eval"]),
        ("tenant=nobody", []),
        ("q=llama", ["alice-train", "bob-train"]),  # any case
        ("mine=1", ["alice-train", "alice-eval", "beta-eval"]),
        ("mine=false", ["alice-train", "bob-train", "alice-eval", "beta-eval"]),
        ("mine=true&q=eval&tenant=alpha", ["alice-eval"]),
    ],
)
def test_a_team_a_name_and_ones_own_jobs_narrow_the_list(jobs, alice, read, query, expected):
    assert read(alice, query) == ids(jobs, *expected)


def test_the_api_names_every_parameter_at_fault_at_once(alice):
    client = APIClient()
    client.force_authenticate(alice)

    response = client.get(f"/api/v1/jobs/?mine=maybe&q={'x' * 201}&state=done&fold=2")

    assert response.status_code == 400
    assert set(response.json()) == {"mine", "q", "state", "fold"}
    assert response.json()["mine"] == ["1 or 0 (or true or false)."]


def test_an_empty_yes_or_no_is_left_out_as_an_empty_filter_is(jobs, alice):
    client = APIClient()
    client.force_authenticate(alice)

    everything = client.get("/api/v1/jobs/").json()["jobs"]
    empty = client.get("/api/v1/jobs/?mine=&fold=&held=&state=")

    assert empty.status_code == 200 and empty.json()["jobs"] == everything


def test_the_portal_names_a_mine_it_cannot_read(alice):
    client = Client()
    client.force_login(alice)

    response = client.get("/?mine=maybe")

    assert response.status_code == 400 and 'data-field="mine"' in response.content.decode()


def test_the_portals_only_mine_box_is_ticked_while_it_narrows_the_list(jobs, alice):
    client = Client()
    client.force_login(alice)

    ticked = client.get("/?mine=1").content.decode()
    unticked = client.get("/").content.decode()

    box = re.compile(r'<input type="checkbox" name="mine" value="1"( checked)?')
    assert box.search(ticked).group(1) == " checked"
    assert box.search(unticked).group(1) is None
