"""The platform's history: who changed how the platform is set up, when, and what. The admin
records its own edits and actions in Django's admin history (`LogEntry`: each object's History
page); every change made elsewhere goes there too, through `record`: through the API (a node's
cordon, drain or uncordon, a maintenance window or a booking planned or taken back, a team's
placements paused or resumed, a teams file applied), through the portal (a team's secret set or
deleted, an API token issued or revoked, a command line's login approved or denied), by the
sign-on groups (a membership made, changed or removed) and by the identity provider's SCIM
pushes (quotas/scim.py), as a system actor (`system_actor`). A secret's value is never written
there, nor a token's key.

Platform admins read it in the admin (History, newest first) and at `GET /api/v1/history/`
(`quotas.api.HistoryView`), as Kubernetes' audit log or `sacctmgr show transactions` give it.
Retention deletes its entries after MLSCHED_HISTORY_RETENTION_DAYS (jobs.retention)."""

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

ACTIONS = {ADDITION: "added", CHANGE: "changed", DELETION: "deleted"}
# A system actor's username starts so: with a colon, which no username Django's validator
# takes (a sign-on's, a SCIM push's, the admin's forms'), so no person's account is ever one.
SYSTEM = "system:"


def record(user, objects, message: str | list, flag: int = CHANGE) -> None:
    """Write a change of `objects` by `user` into the history, as the admin writes its own
    (a deletion recorded before the rows go, while they have their ids)."""
    if objects and user is not None and user.pk is not None:
        LogEntry.objects.log_actions(user.pk, list(objects), flag, change_message=message)


def system_actor(name: str):
    """The account the history names for changes a part of the platform makes on its own, not
    a person (`system_actor("scim")`: the identity provider's SCIM pushes), as every entry
    names an account: `system:<name>`, inactive and without a usable password, so nobody
    signs in as it. Made at its first use."""
    actor, _ = get_user_model()._default_manager.get_or_create(
        username=SYSTEM + name, defaults={"is_active": False, "password": make_password(None)}
    )
    return actor
