"""`manage.py apply_teams FILE`: the tenants and quotas a file under version control declares
are made so, all of the file or none of it, a line said per change and each change in the
admin's history; a second run of the same file changes nothing."""

import json
from io import StringIO

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs.models import Job
from quotas import declared
from quotas.models import Quota, Tenant
from tests.factories import JobFactory, NodeFactory, QuotaFactory, UserFactory

pytestmark = pytest.mark.django_db

ONLY = "registry.example.com/ml/*"
ALLOWED, OTHER = "registry.example.com/ml/train:1", "docker.io/someone/train:1"

ALPHA_AND_BETA = """
tenants:
  - slug: alpha
    fair_share_weight: 2
    cohort: research
  - slug: beta
    name: Beta
    max_queued_jobs: 500
    exclusive_allowed: false
    allowed_images: ["registry.example.com/ml/*"]
    owner_groups: [ml-beta-leads]
    member_groups: [ml-beta]
    quotas:
      "gpu:A100": {guaranteed: 16, borrow_limit: 8, lend_limit: null}
"""


def apply(path: str, *args: str) -> list[str]:
    """apply_teams run on `path`: the lines it says."""
    out = StringIO()
    call_command("apply_teams", path, *args, stdout=out)
    return out.getvalue().splitlines()


def refusal(path: str, *args: str) -> str:
    with pytest.raises(CommandError) as refused:
        apply(path, *args)
    return str(refused.value)


def test_it_creates_the_tenants_and_changes_only_the_fields_given(root, teams, alpha):
    alpha.max_gpus_per_user = 4
    alpha.save()

    said = apply(teams(ALPHA_AND_BETA))

    assert said == [
        "alpha: fair_share_weight 1.0 -> 2.0",
        'alpha: cohort "default" -> "research"',
        "beta: created",
        "beta: quota gpu:A100 added (guaranteed 16, borrow_limit 8, lend_limit null)",
        "1 tenant created, 1 changed, 0 unchanged",
    ]
    alpha.refresh_from_db()
    assert (alpha.name, alpha.fair_share_weight, alpha.cohort) == ("Alpha", 2.0, "research")
    assert alpha.max_gpus_per_user == 4  # not in the file: kept
    beta = Tenant.objects.get(slug="beta")
    assert (beta.name, beta.max_queued_jobs, beta.exclusive_allowed) == ("Beta", 500, False)
    assert (beta.image_patterns(), beta.owner_groups, beta.member_groups) == (
        [ONLY], "ml-beta-leads", "ml-beta"
    )  # fmt: skip
    quota = Quota.objects.get(tenant=beta)
    assert (quota.flavor, quota.guaranteed, quota.borrow_limit, quota.lend_limit) == (
        "gpu:A100", 16, 8, None
    )  # fmt: skip


def test_a_second_run_of_the_same_file_changes_nothing(root, teams, alpha):
    path = teams(ALPHA_AND_BETA)
    apply(path)
    history = LogEntry.objects.count()

    assert apply(path) == ["0 tenants created, 0 changed, 2 unchanged"]
    assert LogEntry.objects.count() == history


def test_quotas_given_become_the_tenants_quotas_exactly(root, teams, alpha, gamma):
    QuotaFactory(tenant=alpha, flavor="cpu", guaranteed=32_000)
    QuotaFactory(tenant=alpha, flavor="memory", guaranteed=64_000)
    QuotaFactory(tenant=gamma, flavor="memory", guaranteed=1_000)
    path = teams("""
tenants:
  - slug: alpha
    quotas:
      "gpu:A100": {guaranteed: 16, borrow_limit: 8}
      cpu: {guaranteed: 64000}
""")

    said = apply(path)

    assert said == [
        "alpha: quota memory removed",
        "alpha: quota gpu:A100 added (guaranteed 16, borrow_limit 8, lend_limit null)",
        "alpha: quota cpu guaranteed 32000 -> 64000",
        "0 tenants created, 1 changed, 0 unchanged",
    ]
    rows = Quota.objects.filter(tenant=alpha).values_list("flavor", "guaranteed", "borrow_limit")
    assert sorted(rows) == [("cpu", 64_000, 0), ("gpu:A100", 16, 8)]
    assert Quota.objects.filter(tenant=gamma).count() == 1  # not in the file: left alone


def test_quotas_not_given_are_left_alone(root, teams, alpha):
    QuotaFactory(tenant=alpha, flavor="cpu", guaranteed=32_000)

    said = apply(teams("tenants:\n  - {slug: alpha, fair_share_weight: 3}\n"))

    assert said[0] == "alpha: fair_share_weight 1.0 -> 3.0"
    assert Quota.objects.get(tenant=alpha).guaranteed == 32_000


def test_an_empty_quotas_mapping_removes_every_quota(root, teams, alpha):
    QuotaFactory(tenant=alpha, flavor="cpu", guaranteed=32_000)

    said = apply(teams("tenants:\n  - {slug: alpha, quotas: {}}\n"))

    assert said[0] == "alpha: quota cpu removed"
    assert not Quota.objects.filter(tenant=alpha).exists()


def test_a_dry_run_says_what_it_would_do_and_writes_nothing(root, teams, alpha):
    QuotaFactory(tenant=alpha, flavor="memory", guaranteed=64_000)
    JobFactory(tenant=alpha, image=OTHER)
    path = teams(ALPHA_AND_BETA.replace("cohort: research", f"allowed_images: ['{ONLY}']"))

    said = apply(path, "--dry-run")

    assert said == [
        "dry run: alpha: fair_share_weight 1.0 -> 2.0",
        'dry run: alpha: allowed_images [] -> ["registry.example.com/ml/*"]',
        "dry run: alpha: held 1 queued job whose image its allowed images no longer let through",
        "dry run: beta: created",
        "dry run: beta: quota gpu:A100 added (guaranteed 16, borrow_limit 8, lend_limit null)",
        "dry run: 1 tenant created, 1 changed, 0 unchanged",
    ]
    alpha.refresh_from_db()
    assert (alpha.fair_share_weight, alpha.allowed_images) == (1.0, "")
    assert not Tenant.objects.filter(slug="beta").exists()
    assert not Job.objects.exclude(held="").exists()
    assert not LogEntry.objects.exists()


def test_an_invalid_value_refuses_the_whole_file(root, teams, alpha):
    path = teams("""
tenants:
  - {slug: beta, name: Beta}
  - {slug: alpha, cohort: research, fair_share_weight: 0}
""")

    said = refusal(path)

    assert said == "alpha: fair_share_weight: Ensure this value is greater than or equal to 0.01."
    assert not Tenant.objects.filter(slug="beta").exists()
    alpha.refresh_from_db()
    assert (alpha.cohort, alpha.fair_share_weight) == ("default", 1.0)
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("teams: []\ntenants: []\n", "the file: unknown key teams (known: tenants, priority_"),
        ("tenants:\n  - {slug: alpha, colour: red}\n", "alpha: unknown key colour (known: slug, "),
        (
            "tenants:\n  - {slug: alpha, quotas: {cpu: {guaranteed: 1, limit: 2}}}\n",
            "alpha: quota cpu: unknown key limit (known: guaranteed, borrow_limit, lend_limit)",
        ),
    ],
    ids=["at the top", "of a tenant", "of a quota"],
)
def test_an_unknown_key_is_refused_naming_it(root, teams, alpha, text, said):
    assert refusal(teams(text)).startswith(said)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("{slug: alpha, max_queued_jobs: many}", "alpha: max_queued_jobs: must be a whole "
         'number or null, not "many"'),
        ("{slug: alpha, exclusive_allowed: 1}", "alpha: exclusive_allowed: must be true or "
         "false, not 1"),
        ("{slug: alpha, allowed_images: python:3.11}", "alpha: allowed_images: must be a list, "
         'not "python:3.11"'),
        ("{slug: alpha, quotas: {cpu: {guaranteed: null}}}", "alpha: quota cpu: guaranteed: "
         "must be a whole number, not null"),
        ("{name: Alpha}", "tenant 1 of the file: slug: required, as text"),
        ("{slug: delta, cohort: research}", "delta: name: required to create the tenant"),
    ],
    ids=["count", "flag", "list", "quota amount", "no slug", "no name for a new tenant"],
)  # fmt: skip
def test_a_value_of_the_wrong_kind_is_refused_naming_tenant_and_field(
    root, teams, alpha, entry, said
):
    assert refusal(teams(f"tenants:\n  - {entry}\n")) == said


def test_a_tenant_listed_twice_is_refused(root, teams):
    path = teams("tenants:\n  - {slug: beta, name: Beta}\n  - {slug: beta, name: B}\n")

    assert refusal(path) == "beta: listed 2 times: list each tenant once"
    assert not Tenant.objects.exists()


def test_a_key_given_twice_is_refused(root, teams):
    path = teams("tenants:\n  - slug: beta\n    name: Beta\n    name: B\n")

    assert "'name' is given twice" in refusal(path)


def test_a_lend_limit_over_the_guarantee_is_refused(root, teams, alpha):
    path = teams("tenants:\n  - {slug: alpha, quotas: {cpu: {guaranteed: 8, lend_limit: 9}}}\n")

    assert refusal(path) == (
        "alpha: quota cpu: lend_limit: A tenant lends at most its guarantee: lower it, or raise it."
    )
    assert not Quota.objects.exists()


def test_a_gpu_type_spelled_unlike_the_nodes_is_refused(root, teams, alpha):
    NodeFactory(gpu_type="A100")
    path = teams("tenants:\n  - {slug: alpha, quotas: {'gpu:a100': {guaranteed: 8}}}\n")

    assert refusal(path) == (
        "alpha: quota gpu:a100: flavor: The nodes report this GPU type as 'A100': use gpu:A100."
    )


def test_narrowing_the_allowed_images_holds_the_queued_jobs_of_other_images(root, teams, alpha):
    kept = JobFactory(tenant=alpha, image=ALLOWED)
    other = JobFactory(tenant=alpha, image=OTHER)

    said = apply(teams(f"tenants:\n  - {{slug: alpha, allowed_images: ['{ONLY}']}}\n"))

    assert (
        said[1] == "alpha: held 1 queued job whose image its allowed images no longer let through"
    )
    assert Job.objects.get(pk=kept.pk).held == ""
    held = Job.objects.get(pk=other.pk)
    assert held.held == Job.Hold.ADMIN
    assert held.pending_message.startswith("Held by a platform admin (root): its image is no")


def test_taking_nodes_whole_away_says_which_queued_jobs_wait(root, teams, alpha):
    JobFactory(tenant=alpha, exclusive=True)

    said = apply(teams("tenants:\n  - {slug: alpha, exclusive_allowed: false}\n"))

    assert said[:2] == [
        "alpha: exclusive_allowed true -> false",
        "alpha: 1 queued exclusive job waits until made shared; running ones run on",
    ]


def test_each_change_is_in_the_admin_history_as_the_users(root, teams, alpha, alice):
    QuotaFactory(tenant=alpha, flavor="memory", guaranteed=64_000)
    path = teams(ALPHA_AND_BETA.replace("cohort: research", "quotas: {}"))
    get_user_model().objects.filter(pk=alice.pk).update(is_superuser=True)

    apply(path, "--as", "alice")

    alpha_entry = LogEntry.objects.get(object_id=str(alpha.pk))
    assert (alpha_entry.user, alpha_entry.action_flag) == (alice, CHANGE)
    assert json.loads(alpha_entry.change_message) == [
        {"changed": {"fields": ["Fair share weight"]}},
        {"deleted": {"name": "quota", "object": "Alpha: memory"}},
    ]
    beta_entry = LogEntry.objects.get(object_id=str(Tenant.objects.get(slug="beta").pk))
    assert (beta_entry.user, beta_entry.action_flag) == (alice, ADDITION)
    assert beta_entry.get_change_message() == "Added. Added quota “Beta: gpu:A100”."


def test_the_first_superuser_is_the_one_recorded_by_default(root, teams):
    UserFactory(username="later", is_superuser=True)

    apply(teams("tenants:\n  - {slug: beta, name: Beta}\n"))

    assert LogEntry.objects.get().user == root


def test_without_a_superuser_a_user_must_be_named_and_be_a_platform_admin(teams, alice):
    path = teams("tenants:\n  - {slug: beta, name: Beta}\n")

    assert refusal(path) == (
        "there is no superuser to record the changes as: name a user with --as"
    )
    assert refusal(path, "--as", "nobody") == "--as: 'nobody' is no platform admin (superuser)"
    assert refusal(path, "--as", "alice") == "--as: 'alice' is no platform admin (superuser)"
    assert not Tenant.objects.filter(slug="beta").exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (None, "No such file or directory"),
        ("tenants: [unclosed\n", "not YAML nor JSON"),
        ("tenants: {alpha: {}}\n", "the file's tenants: a list is expected"),
        ("- slug: alpha\n", "the file declares nothing"),
    ],
    ids=["missing", "not yaml", "no tenants list", "a list alone"],
)
def test_a_file_that_declares_no_tenants_is_refused(root, teams, tmp_path, text, said):
    path = str(tmp_path / "missing.yaml") if text is None else teams(text)

    assert said in refusal(path)


def test_a_json_file_is_read_as_well(root, teams):
    said = apply(teams(json.dumps({"tenants": [{"slug": "beta", "name": "Beta"}]})))

    assert said == ["beta: created", "1 tenant created, 0 changed, 0 unchanged"]


def test_a_tenant_made_meanwhile_by_another_change_refuses_the_file_and_no_500(
    root, teams, monkeypatch
):
    checked = declared._checked

    def made_meanwhile(row, slug, what=""):
        checked(row, slug, what)
        if isinstance(row, Tenant) and row.pk is None:  # another apply commits it now
            Tenant.objects.create(slug=row.slug, name=f"{row.name} too")

    monkeypatch.setattr(declared, "_checked", made_meanwhile)

    said = refusal(teams("tenants:\n  - {slug: beta, name: Beta}\n"))

    assert said == (
        "a tenant, quota or priority class the file makes was made meanwhile by another "
        "change: apply the file again"
    )
    assert not Tenant.objects.filter(slug="beta").exists()
