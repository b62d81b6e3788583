"""Teams as code from a pipeline: `POST /api/v1/tenants/apply/` and CLI `apply-teams FILE`
apply a teams file as `manage.py apply_teams` does, for platform admins alone."""

import pytest
from django.contrib.admin.models import LogEntry

from quotas.models import Tenant
from tests.clusters.test_node_service_api import as_user, cli_of
from tests.quotas.test_apply_teams import ALPHA_AND_BETA

pytestmark = pytest.mark.django_db

APPLY = "/api/v1/tenants/apply/"


def post(user, **body):
    return as_user(user).post(APPLY, body, format="json")


def test_a_platform_admin_applies_a_file_and_a_dry_run_changes_nothing(root, alpha):  # noqa: F811
    dry = post(root, document=ALPHA_AND_BETA, dry_run=True)
    after_dry = Tenant.objects.filter(slug="beta").exists()
    done = post(root, document=ALPHA_AND_BETA)

    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    assert not after_dry
    assert done.status_code == 200
    assert done.json()["lines"][:2] == ["alpha: fair_share_weight 1.0 -> 2.0",
                                        'alpha: cohort "default" -> "research"']  # fmt: skip
    assert done.json()["summary"] == "1 tenant created, 1 changed, 0 unchanged"
    assert (done.json()["created"], done.json()["changed"]) == (1, 1)
    assert Tenant.objects.get(slug="beta").max_queued_jobs == 500
    assert {entry.user for entry in LogEntry.objects.all()} == {root}


def test_anyone_else_is_refused_and_nothing_changes(alpha, alice):
    refused = post(alice, document=ALPHA_AND_BETA)

    assert refused.status_code == 403
    assert "Only a platform admin applies a teams file." in refused.json()["detail"]
    assert not Tenant.objects.filter(slug="beta").exists()


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [({}, "document", "Give the teams file's text"),
     ({"document": "tenants:\n  - {slug: beta, name: Beta, fair_share_weight: 0}\n"},
      "document", "beta: fair_share_weight: Ensure this value is greater than or equal to 0.01"),
     ({"document": "tenants: [{slug: beta, name: Beta, colour: red}]"}, "document",
      "beta: unknown key colour"),
     ({"document": ": : :"}, "document", "document: not YAML nor JSON"),
     ({"document": ALPHA_AND_BETA, "dry_run": "yes"}, "dry_run", "true or false")],
)  # fmt: skip
def test_a_refused_file_is_a_400_naming_the_field_and_writes_nothing(
    root,  # noqa: F811
    alpha,
    body,
    field,
    said,
):
    refused = post(root, **body)

    assert refused.status_code == 400
    assert said in refused.json()[field][0]
    assert not Tenant.objects.filter(slug="beta").exists()
    assert Tenant.objects.get(slug="alpha").fair_share_weight == 1.0


@pytest.mark.django_db(transaction=True)
def test_the_cli_sends_the_file_and_says_each_change(live_server, root, alpha, teams):  # noqa: F811
    path = teams(ALPHA_AND_BETA)
    cli = cli_of(live_server, root)

    dry = cli("apply-teams", path, "--dry-run")
    done = cli("apply-teams", path)
    again = cli("apply-teams", path)

    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[-1] == "dry run: 1 tenant created, 1 changed, 0 unchanged"
    assert done.stdout.splitlines()[0] == "alpha: fair_share_weight 1.0 -> 2.0"
    assert "beta: created" in done.stdout.splitlines()
    assert again.stdout == "0 tenants created, 0 changed, 2 unchanged\n"
