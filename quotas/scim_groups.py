"""SCIM's Groups (quotas/scim.py says what SCIM does): `ScimGroup`s, made, renamed, given
members, deleted by the identity provider's pushes; each change of a user's groups makes their
teams and platform and tenant admin rights follow the groups they are in now (`scim.follow`),
in the same transaction, each in the platform's history as SCIM's."""

import re
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Prefetch
from django.utils import timezone

from quotas import history
from quotas.models import ScimGroup
from quotas.scim import (
    ACTOR,
    EXTERNAL_ID_CHARS,
    GROUP,
    Operations,
    ScimError,
    follow,
    invalid,
    lowered,
    path_key,
    text,
    user_id,
    users,
    when,
)

GROUP_NAME_CHARS = ScimGroup._meta.get_field("display_name").max_length
MEMBER = re.compile(r'members\[value eq "([^"]*)"\]', re.IGNORECASE)  # as `path_key` writes it


@dataclass
class GroupPush:
    """What a push says of a group, each field None where it says nothing."""

    display_name: str | None = None
    external_id: str | None = None
    members: set[int] | None = None


def group_name(value) -> str:
    name = text(value, "displayName", GROUP_NAME_CHARS)
    if not name.strip():
        raise invalid("displayName is required.")
    return name


def member_ids(value) -> set[int]:
    """The user ids a `members` value lists (each `{"value": "<id>"}`; null: none)."""
    if value is None:
        return set()
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise invalid("members is a list of objects, each with the value of a user's id.")
    return {user_id(lowered(item).get("value")) for item in value}


def group_of(resource: dict) -> GroupPush:
    """What a Group resource (a POST's, a PUT's) says of the group: the whole of it."""
    attributes = lowered(resource)
    return GroupPush(
        display_name=group_name(attributes.get("displayname")),
        external_id=text(attributes.get("externalid"), "externalId", EXTERNAL_ID_CHARS),
        members=member_ids(attributes.get("members")),
    )


def patch_group_attribute(push: GroupPush, op: str, path: str, value) -> None:
    """Apply one operation on the group's attribute at `path` to `push`, whose `members` are
    the members so far: an add of members adds them, a remove takes them away (those listed,
    or the one a path `members[value eq "<id>"]` names, or all where neither), a replace
    makes them those listed. An attribute kept not here is ignored."""
    key = path_key(path, GROUP)
    assert push.members is not None
    if key == "displayname":
        if op == "remove":
            raise invalid("displayName cannot be removed.", "mutability")
        push.display_name = group_name(value)
    elif key == "externalid":
        push.external_id = text(None if op == "remove" else value, "externalId",
                                EXTERNAL_ID_CHARS)  # fmt: skip
    elif key == "members" and op == "remove":
        push.members = push.members - member_ids(value) if value is not None else set()
    elif key == "members":
        listed = member_ids(value)
        push.members = push.members | listed if op == "add" else listed
    elif (member := MEMBER.fullmatch(key)) and op == "remove":
        push.members = push.members - {user_id(member[1])}


def patched_group(group: ScimGroup, listed: Operations) -> GroupPush:
    """What a PatchOp's operations make of the group, in their order."""
    push = GroupPush(members=set(group.members.values_list("pk", flat=True)))
    for op, path, value in listed:
        if path is None:
            for name, given in value.items():
                patch_group_attribute(push, op, name, given)
        else:
            patch_group_attribute(push, op, path, value)
    return push


def groups(members: bool = True):
    """The groups, with their members SCIM sees where `members`."""
    rows = ScimGroup.objects.order_by("pk")
    return rows.prefetch_related(Prefetch("members", queryset=users())) if members else rows


def group_with(pk: str, members: bool = True, locked: bool = False) -> ScimGroup:
    """The group of id `pk` (a 404 for none); `locked`: its row, for a change."""
    rows = groups(members and not locked)
    rows = rows.filter(pk=int(pk)) if re.fullmatch(r"[0-9]{1,18}", pk) else rows.none()
    group = (rows.select_for_update() if locked else rows).first()
    if group is None:
        raise ScimError(404, f"No group {pk[:40]!r}.")
    return group


@transaction.atomic
def create_group(push: GroupPush) -> ScimGroup:
    return pushed(ScimGroup(), push, history.system_actor(ACTOR))


@transaction.atomic
def replace_group(pk: str, push: GroupPush) -> ScimGroup:
    return pushed(group_with(pk, locked=True), push, history.system_actor(ACTOR))


@transaction.atomic
def patch_group(pk: str, listed: Operations) -> ScimGroup:
    group = group_with(pk, locked=True)
    return pushed(group, patched_group(group, listed), history.system_actor(ACTOR))


def pushed(group: ScimGroup, push: GroupPush, actor) -> ScimGroup:
    """Give the group (a new one: made) what the push says: its name (a 409 where another
    group has it, in any case), its externalId and its members (each a user SCIM sees: a 400
    naming one that is not); its members' teams and platform admin rights following."""
    made, old_name = group.pk is None, group.display_name
    before = set() if made else set(group.members.values_list("pk", flat=True))
    name = push.display_name or group.display_name
    if ScimGroup.objects.filter(display_name__iexact=name).exclude(pk=group.pk).exists():
        raise ScimError(409, f"displayName {name!r} is another group's.", "uniqueness")
    after = before if push.members is None else push.members
    seen = set(users().filter(pk__in=after - before).values_list("pk", flat=True))
    if unknown := sorted(after - before - seen):
        raise invalid(f"members: no user has id {unknown[0]}.")
    group.display_name, group.modified = name, timezone.now()
    if push.external_id is not None:
        group.external_id = push.external_id
    try:
        with transaction.atomic():
            group.save()
    except IntegrityError:
        raise ScimError(409, f"displayName {name!r} is another group's.", "uniqueness") from None
    group.members.set(after)
    said = "SCIM: made" if made else (f"SCIM: renamed from {old_name}" if name != old_name else "")
    if said:
        history.record(actor, [group], said, history.ADDITION if made else history.CHANGE)
    noted(actor, after - before, f"SCIM: added to group {name}")
    noted(actor, before - after, f"SCIM: removed from group {name}")
    follow((after ^ before) | (after if name != old_name else set()), actor)
    return group


def noted(actor, user_ids: set[int], said: str) -> None:
    history.record(actor, list(get_user_model()._default_manager.filter(pk__in=user_ids)), said)


@transaction.atomic
def delete_group(pk: str) -> None:
    """Delete the group: its members' teams and platform admin rights follow."""
    group, actor = group_with(pk, locked=True), history.system_actor(ACTOR)
    members = set(group.members.values_list("pk", flat=True))
    history.record(actor, [group], "SCIM: deleted", history.DELETION)
    noted(actor, members, f"SCIM: removed from group {group}: the group deleted")
    group.delete()
    follow(members, actor)


def group_resource(group: ScimGroup, base: str, members: bool = True) -> dict:
    """The group as SCIM reads it, its members where `members` (prefetched: `groups`)."""
    resource: dict = {"schemas": [GROUP], "id": str(group.pk), "displayName": group.display_name}
    if group.external_id:
        resource["externalId"] = group.external_id
    if members:
        resource["members"] = [
            {"value": str(user.pk), "display": user.username, "$ref": f"{base}/Users/{user.pk}"}
            for user in group.members.all()
        ]
    resource["meta"] = {"resourceType": "Group", "created": when(group.created),
                        "lastModified": when(group.modified),
                        "location": f"{base}/Groups/{group.pk}"}  # fmt: skip
    return resource
