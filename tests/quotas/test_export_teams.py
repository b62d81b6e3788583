"""The teams as a file `apply_teams` takes, written from the database (`manage.py export_teams`,
`GET /api/v1/tenants/export/`, CLI `export-teams`): applying the export changes nothing, and
applying it after changes made in the admin makes the teams as exported again."""

from decimal import Decimal
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from quotas import declared, exported
from quotas.models import Membership, PriorityClass, Quota, Tenant
from tests.clusters.test_node_service_api import cli_of
from tests.factories import (
    MembershipFactory,
    PriorityClassFactory,
    QuotaFactory,
    TenantFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def platform(alpha, alice, bob):
    """Teams set up in the admin, every kind of field given."""
    gold = PriorityClassFactory(name="gold", value=500, may_preempt=True, max_runtime_s=7200,
                                description="Deadlines")  # fmt: skip
    gold.tenants.set([alpha])
    alpha.allowed_images = "registry.example.com/ml/*\r\n\r\n docker.io/library/python:* "
    alpha.owner_groups, alpha.viewer_groups = "ml-leads", "auditors, finance"
    alpha.spend_alert_per_month = Decimal("1250.50")
    alpha.max_gpus_per_user, alpha.placements_paused = 8, "cluster move"
    alpha.default_priority_class = gold
    alpha.save()
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=16, borrow_limit=8, lend_limit=4)
    MembershipFactory(tenant=alpha, user=UserFactory(username="dora"), role="viewer",
                      from_group="auditors")  # fmt: skip
    return alpha


def export(*args: str) -> str:
    out = StringIO()
    call_command("export_teams", *args, stdout=out)
    return out.getvalue()


def test_it_writes_every_field_of_a_tenant_as_a_file_gives_it(platform):
    teams = yaml.safe_load(export("--tenant", "alpha"))

    (alpha,) = teams["tenants"]
    assert alpha == {
        "slug": "alpha", "name": "Alpha", "fair_share_weight": 1.0, "cohort": "default",
        "max_queued_jobs": None, "max_gpus_per_user": 8, "gpu_hours_per_month": None,
        "gpu_idle_limit_min": None, "spend_alert_per_month": "1250.50",
        "exclusive_allowed": True, "placements_paused": "cluster move",
        "allowed_images": ["registry.example.com/ml/*", "docker.io/library/python:*"],
        "owner_groups": ["ml-leads"], "member_groups": [],
        "viewer_groups": ["auditors", "finance"], "default_priority_class": "gold",
        "quotas": {"gpu:A100": {"guaranteed": 16, "borrow_limit": 8, "lend_limit": 4}},
        "members": {"alice": "owner", "bob": "member"},
    }  # fmt: skip


def test_it_writes_every_priority_class_with_the_tenants_it_is_open_to(platform):
    classes = {c["name"]: c for c in yaml.safe_load(export())["priority_classes"]}

    assert classes["gold"] == {
        "name": "gold", "value": 500, "may_preempt": True, "preempt_exempt_s": 0,
        "max_runtime_s": 7200, "default_runtime_s": None, "max_gpus_per_user": None,
        "max_gpus": None, "fair_share_preemption": "", "description": "Deadlines",
        "tenants": ["alpha"],
    }  # fmt: skip
    assert list(classes) == list(
        PriorityClass.objects.order_by("-value").values_list("name", flat=True)
    )


def test_applying_the_export_changes_nothing(root, platform, gamma):
    outcome = declared.apply(declared.parse(export(), "export"), root)

    assert outcome.lines == []
    assert outcome.counts["unchanged"] == Tenant.objects.count() == 2
    assert outcome.classes["unchanged"] == PriorityClass.objects.count()


def test_applying_the_export_undoes_changes_made_since(root, platform, bob):
    text = export()
    Tenant.objects.filter(slug="alpha").update(spend_alert_per_month=None, cohort="other",
                                               allowed_images="")  # fmt: skip
    Quota.objects.filter(tenant=platform).delete()
    Membership.objects.filter(user=bob).update(role="viewer")
    PriorityClass.objects.filter(name="gold").update(max_runtime_s=None, description="")

    declared.apply(declared.parse(text, "export"), root)

    assert export() == text
    assert Tenant.objects.get(slug="alpha").spend_alert_per_month == Decimal("1250.50")


def test_a_spend_alert_changed_by_a_file_is_said_as_a_file_writes_it(root, alpha):
    teams = declared.parse("tenants: [{slug: alpha, spend_alert_per_month: '99.90'}]", "file")

    outcome = declared.apply(teams, root)

    assert outcome.lines == ['alpha: spend_alert_per_month null -> "99.90"']


def test_a_members_group_stays_the_groups(root, platform):
    declared.apply(declared.parse(export(), "export"), root)

    dora = Membership.objects.get(user__username="dora")
    assert (dora.role, dora.from_group) == ("viewer", "auditors")


def test_it_names_a_tenant_it_does_not_have(platform):
    with pytest.raises(CommandError, match="--tenant: no tenant 'nope'"):
        export("--tenant", "alpha", "--tenant", "nope")


def test_it_exports_every_tenant_without_tenant(platform, gamma):
    slugs = [t["slug"] for t in yaml.safe_load(export())["tenants"]]

    assert slugs == ["alpha", "gamma"]


@pytest.mark.parametrize(
    ("given", "read"),
    [("1000.00", Decimal("1000.00")), (1000, Decimal("1000.00")), (12.5, Decimal("12.50")),
     (None, None)],
)  # fmt: skip
def test_a_files_spend_alert_is_read_to_the_cent(given, read):
    teams = declared.declared({"tenants": [{"slug": "a", "spend_alert_per_month": given}]})

    assert teams.tenants[0].fields["spend_alert_per_month"] == read


@pytest.mark.parametrize("given", ["12.345", 0.001, True, "abc", "NaN", "1e400", [], "Infinity"])
def test_a_files_spend_alert_that_is_no_amount_to_the_cent_is_refused_naming_it(given):
    with pytest.raises(declared.Refused, match="a: spend_alert_per_month: must be an amount"):
        declared.declared({"tenants": [{"slug": "a", "spend_alert_per_month": given}]})


def test_a_spend_alert_the_model_refuses_is_refused_naming_the_tenant(root, alpha):
    teams = declared.parse("tenants: [{slug: alpha, spend_alert_per_month: '0.00'}]", "file")

    with pytest.raises(declared.Refused, match="alpha: "):
        declared.apply(teams, root)
    assert Tenant.objects.get(slug="alpha").spend_alert_per_month is None


def test_a_platform_admin_reads_it_through_the_api(root, platform, gamma):
    client = APIClient()
    client.force_authenticate(root)

    answer = client.get("/api/v1/tenants/export/", {"tenant": ["gamma"]})

    assert answer.status_code == 200
    assert answer.json() == {
        "document": exported.written(exported.document(["gamma"])), "tenants": 1,
        "classes": PriorityClass.objects.count(),
    }  # fmt: skip
    assert answer.json()["document"].startswith("# The teams as mlsched has them")


def test_anyone_else_is_refused_and_an_unknown_tenant_named(root, alice):
    client = APIClient()
    client.force_authenticate(alice)
    refused = client.get("/api/v1/tenants/export/")
    client.force_authenticate(root)
    unknown = client.get("/api/v1/tenants/export/", {"tenant": "nope"})

    assert refused.status_code == 403
    assert unknown.status_code == 400 and unknown.json() == {"tenant": ["No tenant 'nope'."]}


@pytest.mark.django_db(transaction=True)
def test_the_cli_writes_the_file_apply_teams_takes_back(live_server, root, teams):
    tenant = TenantFactory(slug="delta", name="Delta")
    QuotaFactory(tenant=tenant, flavor="gpu:H100", guaranteed=4)
    cli = cli_of(live_server, root)

    done = cli("export-teams", "--tenant", "delta")
    again = cli("apply-teams", teams(done.stdout))

    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["tenants"][0]["quotas"] == {
        "gpu:H100": {"guaranteed": 4, "borrow_limit": 0, "lend_limit": None}
    }
    assert again.stdout == "0 tenants created, 0 changed, 1 unchanged\n"
