"""The platform's history (quotas/history.py): changes made through the API, the portal and
the sign-on groups are in the admin's history beside the admin's own, with who, when and what,
never a secret's value or a token's key; platform admins read it in the admin and at
GET /api/v1/history/; retention deletes it after MLSCHED_HISTORY_RETENTION_DAYS."""

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from jobs import retention, tasks
from quotas import history
from quotas.models import ApiToken, Membership, Tenant
from tests.clusters.test_node_service_api import cli_of
from tests.factories import ClusterFactory, MembershipFactory, NodeFactory, UserFactory
from tests.test_proxy_auth import signed, who

pytestmark = pytest.mark.django_db

HISTORY = "/api/v1/history/"
SECRET = "hf_value_never_recorded"


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def portal(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def entries(**narrowed) -> list[tuple[str, str, int, str, str]]:
    """The history, oldest first: who, the model, the action, the object and the message."""
    rows = LogEntry.objects.filter(**narrowed).select_related("user", "content_type")
    return [(e.user.username, e.content_type.model, e.action_flag, e.object_repr,
             e.get_change_message()) for e in rows.order_by("id")]  # fmt: skip


def test_a_nodes_cordon_drain_and_uncordon_through_the_api_are_recorded_once_each(root):
    node = NodeFactory(cluster=ClusterFactory(name="east"), name="gpu-07")
    url = "/api/v1/nodes/east/gpu-07/"

    api(root).post(f"{url}cordon/", {"reason": "bad DIMM"}, format="json")
    api(root).post(f"{url}cordon/", {}, format="json")  # already cordoned: no change
    api(root).post(f"{url}uncordon/", {}, format="json")
    api(root).post(f"{url}drain/", {"reason": "reboot"}, format="json")

    assert entries(object_id=str(node.pk)) == [
        ("root", "node", 2, str(node), "Cordoned through the API: bad DIMM"),
        ("root", "node", 2, str(node), "Uncordoned through the API"),
        ("root", "node", 2, str(node), "Drained through the API: reboot"),
    ]


def test_a_window_planned_and_taken_back_and_a_teams_pause_through_the_api_are_recorded(
    root, alpha
):
    ClusterFactory(name="east")
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
    planned = api(root).post("/api/v1/maintenance/", {
        "cluster": "east", "starts_at": starts.isoformat(),
        "ends_at": (starts + timedelta(hours=4)).isoformat(), "reason": "new PSUs",
    }, format="json")  # fmt: skip
    api(root).delete(f"/api/v1/maintenance/{planned.json()['id']}/")
    api(root).post(f"/api/v1/tenants/{alpha.slug}/pause/", {"reason": "budget"}, format="json")
    api(root).post(f"/api/v1/tenants/{alpha.slug}/resume/", {}, format="json")

    said = [(who_, kind, flag, message) for who_, kind, flag, _, message in entries()]
    assert said == [
        ("root", "maintenancewindow", 1, "Planned through the API"),
        ("root", "maintenancewindow", 3, "Taken back through the API"),
        ("root", "tenant", 2, "Placements paused through the API: budget"),
        ("root", "tenant", 2, "Placements resumed through the API"),
    ]


def test_a_teams_secrets_set_and_deleted_on_the_api_and_the_portal_are_recorded_without_values(
    alice, alpha
):
    url = f"/api/v1/tenants/{alpha.slug}/secrets/HF_TOKEN/"
    api(alice).put(url, {"value": SECRET}, format="json")
    api(alice).put(url, {"value": SECRET + "2", "as_file": True}, format="json")
    api(alice).delete(url)
    portal(alice).post("/secrets/", {"tenant": alpha.slug, "name": "WANDB", "value": SECRET})
    portal(alice).post(f"/secrets/{alpha.slug}/WANDB/delete/")

    said = [(kind, flag, message) for _, kind, flag, _, message in entries(user=alice)]
    assert said == [
        ("tenantsecret", 1, "Created through the API: a variable"),
        ("tenantsecret", 2, "Replaced through the API: a file"),
        ("tenantsecret", 3, "Deleted through the API"),
        ("tenantsecret", 1, "Created on the portal's secrets page: a variable"),
        ("tenantsecret", 3, "Deleted on the portal's secrets page"),
    ]
    assert SECRET not in str(list(LogEntry.objects.values()))


def test_an_api_token_issued_and_revoked_is_recorded_without_its_key(alice):
    issued = portal(alice).post("/tokens/", {"name": "laptop", "read_only": "on"})
    token = ApiToken.objects.get(user=alice)
    portal(alice).post(f"/tokens/{token.pk}/revoke/")

    key = issued.context["issued"]["key"]
    assert [(flag, message) for *_, flag, _, message in entries(user=alice)] == [
        (1, "Issued (read-only, never expires)"),
        (3, "Revoked (of alice)"),
    ]
    assert key not in str(list(LogEntry.objects.values()))


def test_memberships_the_sign_on_groups_make_change_and_remove_are_the_users_own_changes(
    settings, alpha
):
    settings.MLSCHED_AUTH_USER_HEADER = "X-Auth-Request-User"
    settings.MLSCHED_AUTH_GROUPS_HEADER = "X-Auth-Request-Groups"
    Tenant.objects.filter(pk=alpha.pk).update(member_groups="ml", viewer_groups="auditors")
    browser = signed("alice", **{"X-Auth-Request-Groups": "ml"})
    who(browser)
    browser.defaults["HTTP_X_AUTH_REQUEST_GROUPS"] = "auditors"
    who(browser)
    browser.defaults["HTTP_X_AUTH_REQUEST_GROUPS"] = ""
    who(browser)

    assert [(w, flag, message) for w, _, flag, _, message in entries()] == [
        ("alice", 1, "Made member by sign-on group ml"),
        ("alice", 2, "Made viewer by sign-on group auditors"),
        ("alice", 3, "Removed: no sign-on group gives it"),
    ]
    assert not Membership.objects.exists()


def test_platform_admins_read_the_history_newest_first_narrowed_and_paged(root, alice):
    node = NodeFactory(cluster=ClusterFactory(name="east"), name="gpu-07")
    for verb in ("cordon", "uncordon", "cordon"):
        api(root).post(f"/api/v1/nodes/east/gpu-07/{verb}/", {}, format="json")
    portal(alice).post("/tokens/", {"name": "laptop"})

    newest = api(root).get(HISTORY).json()
    nodes = api(root).get(HISTORY, {"kind": "node", "object": node.pk, "limit": 2}).json()
    older = api(root).get(HISTORY, {"kind": "node", "before": nodes["next"]}).json()
    alices = api(root).get(HISTORY, {"user": "alice"}).json()
    later = api(root).get(HISTORY, {"since": "now+1h"}).json()

    first = newest["entries"][0]
    assert set(first) == {"id", "time", "user", "action", "kind", "object_id", "object",
                          "message"}  # fmt: skip
    assert (first["user"], first["action"], first["kind"]) == ("alice", "added", "apitoken")
    assert [e["message"] for e in nodes["entries"] + older["entries"]] == [
        "Cordoned through the API",
        "Uncordoned through the API",
        "Cordoned through the API",
    ]
    assert older["next"] is None
    assert [e["kind"] for e in alices["entries"]] == ["apitoken"]
    assert later["entries"] == []


def test_the_history_api_names_each_parameter_at_fault_and_is_a_platform_admins_alone(root, alice):
    bad = api(root).get(HISTORY, {"kind": "nonsense", "limit": "0", "since": "soon",
                                  "before": "x"})  # fmt: skip
    orphan = api(root).get(HISTORY, {"object": "3"})
    member = api(alice).get(HISTORY)

    assert bad.status_code == 400
    assert set(bad.json()) == {"kind", "limit", "since", "before"}
    assert orphan.status_code == 400 and set(orphan.json()) == {"object"}
    assert member.status_code == 403


def test_the_admins_history_page_shows_every_change_to_platform_admins_alone(root, alpha):
    owner = UserFactory(username="olga", is_staff=True)
    MembershipFactory(tenant=alpha, user=owner, role=Membership.Role.OWNER)
    api(root).post(f"/api/v1/tenants/{alpha.slug}/pause/", {"reason": "budget"}, format="json")

    page = portal(root).get("/admin/admin/logentry/")
    tenant_admin = portal(owner).get("/admin/admin/logentry/")
    add = portal(root).get("/admin/admin/logentry/add/")

    assert page.status_code == 200
    assert "Placements paused through the API: budget" in page.text
    assert tenant_admin.status_code == 403
    assert add.status_code == 403


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_the_history_a_change_to_a_line_narrowed_by_user(live_server, root):
    NodeFactory(cluster=ClusterFactory(name="east"), name="gpu-07")
    cli = cli_of(live_server, root)  # its token's issue is root's first change

    cli("cordon", "east", "gpu-07", "--reason", "bad DIMM")
    listed = cli("history", "--kind", "node")
    nobody = cli("history", "--user", "nobody")
    wrong = cli("history", "--kind", "nonsense")

    assert listed.returncode == 0, listed.stderr
    header, line = listed.stdout.splitlines()
    assert header.split()[:4] == ["time", "(UTC)", "user", "action"]
    assert line.split()[2:6] == ["root", "changed", "node", "east/gpu-07"]
    assert line.endswith("Cordoned through the API: bad DIMM")
    assert nobody.stdout == "No changes.\n"
    assert wrong.returncode == 1 and "kind" in wrong.stderr


def changed(user, days_ago: float) -> LogEntry:
    """A change of the user's own account, in the history `days_ago`."""
    history.record(user, [user], f"changed {days_ago} days ago")
    entry = LogEntry.objects.latest("id")
    entry.action_time = timezone.now() - timedelta(days=days_ago)
    entry.save(update_fields=["action_time"])
    return entry


def left() -> list[int]:
    return list(LogEntry.objects.order_by("id").values_list("pk", flat=True))


def test_retention_deletes_history_past_the_setting_in_batches_and_keeps_the_rest(settings, root):
    settings.MLSCHED_HISTORY_RETENTION_DAYS = 30
    old = [changed(root, days_ago=31 + n) for n in range(5)]
    recent = changed(root, days_ago=29)

    counts = retention.prune(keep_days=0, job_days=0, sign_in_days=0, batch=2)

    assert counts["history"] == len(old)
    assert left() == [recent.pk]


def test_retention_of_0_days_keeps_all_the_history(settings, root):
    settings.MLSCHED_HISTORY_RETENTION_DAYS = 0
    ancient = changed(root, days_ago=5000)

    counts = retention.prune(keep_days=0, job_days=0, sign_in_days=0)

    assert counts["history"] == 0 and left() == [ancient.pk]


def test_the_daily_task_keeps_the_history_two_years_by_default(root):
    changed(root, days_ago=731)
    recent = changed(root, days_ago=729)

    tasks.prune()

    assert retention.retention_days("MLSCHED_HISTORY_RETENTION_DAYS") == 730
    assert left() == [recent.pk]


def test_the_command_prunes_the_history_past_history_days_and_its_dry_run_deletes_none(root):
    old, recent = changed(root, days_ago=40), changed(root, days_ago=20)
    rest = ["--log-days", "0", "--job-days", "0", "--sign-in-days", "0"]
    would, did = StringIO(), StringIO()

    call_command("prune", "--history-days", "30", "--dry-run", *rest, stdout=would)
    kept_by_the_dry_run = left()
    call_command("prune", "--history-days", "30", *rest, stdout=did)

    assert "would delete 1 history" in would.getvalue()
    assert kept_by_the_dry_run == [old.pk, recent.pk]
    assert "deleted 1 history" in did.getvalue()
    assert left() == [recent.pk]


def test_a_negative_history_retention_is_refused_naming_the_setting(settings):
    settings.MLSCHED_HISTORY_RETENTION_DAYS = -1

    with pytest.raises(CommandError, match="MLSCHED_HISTORY_RETENTION_DAYS must be 0"):
        call_command("prune", stdout=StringIO())
