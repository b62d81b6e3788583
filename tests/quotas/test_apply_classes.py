"""Priority classes as code (quotas/declared.py): a teams file's `priority_classes:` makes and
changes classes by name, the tenants each is open to exactly those listed, and a tenant's
`default_priority_class` names one; all or nothing with the tenants, each change in the
platform's history."""

import pytest
from django.contrib.admin.models import LogEntry
from rest_framework.test import APIClient

from quotas.models import PriorityClass, Tenant
from tests.quotas.test_apply_teams import apply, refusal

pytestmark = pytest.mark.django_db

CLASSES = """
priority_classes:
  - name: urgent
    value: 1000
    may_preempt: true
    max_runtime_s: 86400
    description: deadlines
    tenants: [alpha, beta]
  - name: scavenger
    value: -100
tenants:
  - slug: beta
    name: Beta
    default_priority_class: urgent
"""


def test_it_makes_the_classes_open_to_the_tenants_listed_and_sets_a_default(root, teams, alpha):
    said = apply(teams(CLASSES))
    again = apply(teams(CLASSES))

    assert said == [
        "beta: created",
        "class urgent: created",
        'class urgent: tenants [] -> ["alpha", "beta"]',
        "class scavenger: created",
        'beta: default_priority_class null -> "urgent"',
        "1 tenant created, 0 changed, 0 unchanged; 2 classes created, 0 changed, 0 unchanged",
    ]
    assert again == ["0 tenants created, 0 changed, 1 unchanged; 0 classes created, 0 changed, "
                     "2 unchanged"]  # fmt: skip
    urgent = PriorityClass.objects.get(name="urgent")
    assert (urgent.value, urgent.may_preempt, urgent.max_runtime_s, urgent.description) == (
        1000, True, 86400, "deadlines"
    )  # fmt: skip
    assert sorted(t.slug for t in urgent.tenants.all()) == ["alpha", "beta"]
    assert Tenant.objects.get(slug="beta").default_priority_class == urgent
    assert PriorityClass.objects.get(name="scavenger").value == -100


def test_it_changes_the_fields_given_and_the_tenants_listed_recording_each_change(
    root, teams, alpha
):
    apply(teams(CLASSES))
    changed = CLASSES.replace("value: 1000", "value: 900").replace("[alpha, beta]", "[beta]")

    said = apply(teams(changed))

    assert said == [
        "class urgent: value 1000 -> 900",
        'class urgent: tenants ["alpha", "beta"] -> ["beta"]',
        "0 tenants created, 0 changed, 1 unchanged; 0 classes created, 1 changed, 1 unchanged",
    ]
    urgent = PriorityClass.objects.get(name="urgent")
    (last,) = LogEntry.objects.filter(object_id=str(urgent.pk)).order_by("-id")[:1]
    assert (last.user, last.get_change_message()) == (root, "Changed Value and Tenants.")


def test_a_tenants_default_class_may_be_cleared(root, teams, alpha):
    apply(teams(CLASSES))

    said = apply(teams("tenants:\n  - {slug: beta, default_priority_class: null}\n"))

    assert said == ['beta: default_priority_class "urgent" -> null',
                    "0 tenants created, 1 changed, 0 unchanged"]  # fmt: skip
    assert Tenant.objects.get(slug="beta").default_priority_class is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("priority_classes:\n  - {name: urgent}\n", "class urgent: value: required"),
        ("priority_classes:\n  - {name: urgent, value: 1, colour: red}\n",
         "class urgent: unknown key colour"),
        ("priority_classes:\n  - {name: urgent, value: x}\n",
         'class urgent: value: must be a whole number, not "x"'),
        ("priority_classes:\n  - {name: urgent, value: 1, tenants: [nobody]}\n",
         "class urgent: tenants: no tenant 'nobody'"),
        ("priority_classes:\n  - {name: a, value: 1}\n  - {name: a, value: 2}\n",
         "class a: listed 2 times: list each class once"),
        ("priority_classes:\n  - {name: a, value: 1}\n  - {name: b, value: 1}\n",
         "class b: value: Priority class with this Value already exists."),
        ("tenants:\n  - {slug: alpha, default_priority_class: nothing}\n",
         "alpha: default_priority_class: no class 'nothing'"),
        ("priority_classes:\n  - {name: urgent, value: 1, may_preempt: true}\n"
         "tenants:\n  - {slug: alpha, default_priority_class: urgent}\n",
         "alpha: default_priority_class: Class 'urgent' is not open to this tenant"),
    ],
    ids=["no value", "unknown key", "wrong type", "unknown tenant", "twice", "same value",
         "unknown default", "default not open"],
)  # fmt: skip
def test_a_class_the_models_refuse_changes_nothing_and_says_why(root, teams, alpha, text, said):
    assert said in refusal(teams(text + "  \n"))
    assert not PriorityClass.objects.filter(name__in=["urgent", "a", "b"]).exists()
    assert Tenant.objects.get(slug="alpha").default_priority_class is None


def test_the_api_counts_the_classes_beside_the_tenants(root, alpha):
    client = APIClient()
    client.force_authenticate(root)

    done = client.post("/api/v1/tenants/apply/", {"document": CLASSES}, format="json")

    assert done.status_code == 200, done.content
    assert (done.json()["created"], done.json()["classes"]) == (
        1, {"created": 2, "changed": 0, "unchanged": 0}
    )  # fmt: skip
