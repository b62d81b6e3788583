"""GET /api/v1/priority-classes/ and the CLI's `classes`: the classes the caller's teams may
submit at, with what a job at each meets, naming only the caller's own teams."""

import pytest
from rest_framework.test import APIClient

from tests.factories import PriorityClassFactory, UserFactory
from tests.jobs.test_cli import cli  # noqa: F401 - the fixture, for the command line

pytestmark = pytest.mark.django_db


@pytest.fixture
def classes(alpha, gamma):
    """normal (open to all), urgent (preempts, by fair share too, open to alpha), secret
    (preempts, gamma's)."""
    urgent = PriorityClassFactory(name="urgent", value=100, may_preempt=True,
                                  preempt_exempt_s=600, max_runtime_s=14_400,
                                  fair_share_preemption="on", max_gpus_per_user=8,
                                  max_gpus=64)  # fmt: skip
    urgent.tenants.add(alpha)
    secret = PriorityClassFactory(name="secret", value=50, may_preempt=True)
    secret.tenants.add(gamma)
    return {"normal": PriorityClassFactory(name="normal", value=0), "urgent": urgent,
            "secret": secret}  # fmt: skip


def listed(user, query: str = ""):
    client = APIClient()
    client.force_authenticate(user)
    return client.get(f"/api/v1/priority-classes/{query}")


def test_it_lists_the_classes_open_to_the_callers_teams_highest_first(alice, classes):
    response = listed(alice)

    assert response.status_code == 200
    assert response.json()["priority_classes"] == [
        {"name": "urgent", "value": 100, "may_preempt": True, "fair_share_preemption": True,
         "preempt_exempt_s": 600, "max_runtime_s": 14_400, "default_runtime_s": None,
         "max_gpus_per_user": 8, "max_gpus": 64, "gpus_held": 0, "your_gpus_held": 0,
         "description": "",
         "open_to": ["alpha"], "default_for": []},
        {"name": "normal", "value": 0, "may_preempt": False, "fair_share_preemption": False,
         "preempt_exempt_s": 0, "max_runtime_s": None, "default_runtime_s": None,
         "max_gpus_per_user": None, "max_gpus": None, "gpus_held": 0, "your_gpus_held": 0,
         "description": "", "open_to": ["alpha"],
         "default_for": ["alpha"]},
    ]  # fmt: skip


def test_another_teams_class_and_slug_are_not_given(alice, charlie, classes):
    assert "gamma" not in listed(alice).text and "secret" not in listed(alice).text
    assert [c["name"] for c in listed(charlie).json()["priority_classes"]] == ["secret", "normal"]


def test_another_teams_slug_is_refused_as_an_unknown_one(alice, classes):
    response = listed(alice, "?tenant=gamma")

    assert response.status_code == 400
    assert list(response.json()) == ["tenant"]


def test_a_platform_admin_sees_every_class(classes, alpha, gamma):
    root = UserFactory(username="root", is_superuser=True, is_staff=True)

    names = [c["name"] for c in listed(root).json()["priority_classes"]]
    for_gamma = listed(root, "?tenant=gamma").json()["priority_classes"]

    assert names == ["urgent", "secret", "normal"]
    assert [(c["name"], c["open_to"]) for c in for_gamma] == [
        ("secret", ["gamma"]), ("normal", ["gamma"])
    ]  # fmt: skip


def test_it_asks_for_a_token(classes):
    assert APIClient().get("/api/v1/priority-classes/").status_code in (401, 403)


@pytest.mark.django_db(transaction=True)
def test_the_cli_lists_them(cli, classes):  # noqa: F811
    done = cli("classes")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["class", "value", "preempts", "fair", "share", "exempt", "s",
                                "max", "runtime", "s", "default", "runtime", "s", "gpus", "per",
                                "user", "gpus", "held", "yours", "open", "to", "default",
                                "for"]  # fmt: skip
    assert lines[1].split() == ["urgent", "100", "yes", "yes", "600", "14400", "-", "8", "64",
                                "0", "0", "alpha", "-"]  # fmt: skip
    assert lines[2].split() == ["normal", "0", "no", "no", "0", "-", "-", "-", "-", "0", "0",
                                "alpha", "alpha"]  # fmt: skip
