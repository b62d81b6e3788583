"""Who may submit at which priority class: a class that may preempt is open only to the tenants
it lists, so no team evicts its neighbours by choosing a class."""

import pytest
from rest_framework.test import APIClient

from jobs.management.commands.seed_demo import seed
from jobs.models import Job
from quotas.models import PriorityClass, Tenant
from tests.factories import PriorityClassFactory

pytestmark = pytest.mark.django_db

SPEC = {
    "tenant": "alpha", "name": "resnet", "family": "training", "image": "pytorch:2",
    "command": ["python", "train.py"], "cpu_milli": 8000, "memory_mb": 32_000, "gpus": 4,
    "max_runtime_s": 3600,
}  # fmt: skip


def submit(user, priority_class: str):
    client = APIClient()
    client.force_authenticate(user)
    return client.post("/api/v1/jobs/", {**SPEC, "priority_class": priority_class}, format="json")


def test_a_class_that_may_preempt_is_refused_to_a_tenant_it_does_not_list(alice, gamma):
    critical = PriorityClassFactory(name="critical", value=1000, may_preempt=True)
    critical.tenants.add(gamma)

    response = submit(alice, "critical")

    assert response.status_code == 400
    assert "alpha" in response.json()["priority_class"][0]
    assert not Job.objects.exists()


def test_a_class_that_may_preempt_lists_nobody_is_open_to_nobody(alice):
    PriorityClassFactory(name="critical", value=1000, may_preempt=True)

    assert submit(alice, "critical").status_code == 400


def test_a_class_that_may_preempt_takes_jobs_from_the_tenants_it_lists(alice, alpha):
    critical = PriorityClassFactory(name="critical", value=1000, may_preempt=True)
    critical.tenants.add(alpha)

    response = submit(alice, "critical")

    assert response.status_code == 201
    assert Job.objects.get().priority_class == critical


def test_a_class_that_may_not_preempt_is_open_to_all_until_it_lists_tenants(alice, gamma):
    low = PriorityClassFactory(name="low", value=-100)
    assert submit(alice, "low").status_code == 201

    low.tenants.add(gamma)

    assert submit(alice, "low").status_code == 400


def test_the_demo_tenant_may_use_the_demo_classes_that_preempt():
    seed()
    demo = Tenant.objects.get(slug="demo")

    assert all(c.open_to(demo) for c in PriorityClass.objects.all())
