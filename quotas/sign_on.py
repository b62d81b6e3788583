"""What the two single sign-ons share, the authenticating proxy's (quotas/proxy_auth.py) and
OpenID Connect's (quotas/oidc.py): the names they take for usernames, the account a login
leaves (made without a usable password, its email address the sign-on's), and what the user's
groups there make them (`join_groups`: teams' owners, members and viewers; platform admins;
tenant admins).
Where the identity provider pushes the groups over SCIM (quotas/scim.py, `groups_pushed`),
those are the groups `join_groups` follows, and a sign-on's are not read."""

import logging

from django.conf import settings
from django.contrib.auth.models import Group
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from quotas import admin_scope, history
from quotas.models import Membership, Tenant, group_names

log = logging.getLogger(__name__)

NAME_LENGTH = 150  # Django's username's
# The auth group marking the platform admins a sign-on group made (MLSCHED_AUTH_ADMIN_GROUPS):
# those, and only those, it makes no longer admins once they are in none of the groups; and the
# one marking those of them who were staff before (a tenant admin), who stay staff then.
ADMINS_BY_SIGN_ON = "platform admins by sign-on"
STAFF_BEFORE = "platform admins by sign-on, staff before"
# The auth group of tenant admins (admin_scope.TENANT_ADMIN_PERMISSIONS), and the ones marking
# the tenant admins a sign-on group made (MLSCHED_AUTH_TENANT_ADMIN_GROUPS), those of them who
# were staff before, and those who were in the group before (given it by hand), who keep that.
TENANT_ADMINS = "tenant admins"
TENANT_ADMINS_BY_SIGN_ON = "tenant admins by sign-on"
TENANT_STAFF_BEFORE = "tenant admins by sign-on, staff before"
TENANT_ADMINS_BEFORE = "tenant admins by sign-on, in tenant admins before"


def is_username(name: str) -> bool:
    """Whether Django takes `name` for a username: its validator's characters, at most
    NAME_LENGTH of them."""
    if len(name) > NAME_LENGTH:
        return False
    try:
        UnicodeUsernameValidator()(name)
    except ValidationError:
        return False
    return True


def configured(user, created: bool, email: str | None, source: str):
    """The account as a sign-on through `source` leaves it: made without a usable password
    (its user signs in there, and a password reset, which skips such accounts, cannot give it
    one), its email address `source`'s where that is one."""
    changed = []
    if created:
        user.set_unusable_password()
        changed.append("password")
    if email and email != user.email:
        try:
            validate_email(email)
        except ValidationError:
            log.warning("%s's email address for %s is no address: kept", source, user)
        else:
            user.email = email
            changed.append("email")
    if changed:
        user.save(update_fields=changed)
    return user


def groups_pushed() -> bool:
    """Whether the identity provider pushes the users' groups over SCIM (MLSCHED_SCIM_TOKEN
    set, quotas/scim.py): then those alone make teams' members and platform admins, and a
    sign-on's groups (a groups claim, a groups header) are not followed at login."""
    return bool(settings.MLSCHED_SCIM_TOKEN)


@transaction.atomic
def join_groups(user, groups: set[str], by=None) -> None:
    """Follow the user's sign-on `groups`: their memberships (`memberships_of`), whether they
    are a platform admin (`admin_by`) and, after it, whether a tenant admin (`tenant_admin_by`),
    each change in the platform's history as `by`'s (None: the user's own, at their sign-on)."""
    memberships_of(user, groups, by or user)
    admin_by(user, groups, by or user)
    tenant_admin_by(user, groups, by or user)


def memberships_of(user, groups: set[str], by) -> None:
    """Make the user's memberships from sign-on groups those the tenants give `groups`
    (`Tenant.group_role`): one made where a tenant gives a role and the user has none, one
    from a group changed to the role and group given now, one from a group the tenant no
    longer gives removed; a membership given by hand is left as it is."""
    mine = {m.tenant_id: m for m in Membership.objects.select_for_update().filter(user=user)}
    named = Tenant.objects.exclude(owner_groups="", member_groups="", viewer_groups="")
    given = {tenant.pk: role for tenant in named if (role := tenant.group_role(groups))}
    for tenant_id, (role, group) in given.items():
        held = mine.get(tenant_id)
        said = f"Made {role} by sign-on group {group}"
        if held is None:
            made = Membership.objects.create(
                tenant_id=tenant_id, user=user, role=role, from_group=group
            )
            history.record(by, [made], said, history.ADDITION)
        elif held.from_group and (held.role, held.from_group) != (role, group):
            held.role, held.from_group = role, group
            held.save(update_fields=["role", "from_group"])
            history.record(by, [held], said)
    gone = [m for tenant_id, m in mine.items() if m.from_group and tenant_id not in given]
    history.record(by, gone, "Removed: no sign-on group gives it", history.DELETION)
    Membership.objects.filter(pk__in=[m.pk for m in gone]).delete()


def admin_by(user, groups: set[str], by) -> None:
    """A user in one of MLSCHED_AUTH_ADMIN_GROUPS made a platform admin (superuser and staff),
    marked as made so (the auth group ADMINS_BY_SIGN_ON, and STAFF_BEFORE for one who was
    staff already, a tenant admin); one so made who is in none of them any more (or the setting
    gone) no longer one, staff again only if they were before. A platform admin made by hand
    is left as they are."""
    admin_groups = named_in(settings.MLSCHED_AUTH_ADMIN_GROUPS, groups)
    marks = {g.name: g for g in user.groups.filter(name__in=[ADMINS_BY_SIGN_ON, STAFF_BEFORE])}
    if admin_groups and not user.is_superuser:
        made = [ADMINS_BY_SIGN_ON, *([STAFF_BEFORE] if user.is_staff else [])]
        user.is_superuser = user.is_staff = True
        user.save(update_fields=["is_superuser", "is_staff"])
        user.groups.add(*auth_groups(made))
        history.record(by, [user], f"Made a platform admin by sign-on group {admin_groups[0]}")
    elif not admin_groups and ADMINS_BY_SIGN_ON in marks:
        user.is_superuser, user.is_staff = False, STAFF_BEFORE in marks
        user.save(update_fields=["is_superuser", "is_staff"])
        user.groups.remove(*marks.values())
        history.record(by, [user], "No longer a platform admin: no sign-on group makes them one")


def tenant_admin_by(user, groups: set[str], by) -> None:
    """A user in one of MLSCHED_AUTH_TENANT_ADMIN_GROUPS made a tenant admin (staff, in the auth
    group TENANT_ADMINS), marked as made so (TENANT_ADMINS_BY_SIGN_ON; TENANT_STAFF_BEFORE for
    one who was staff already, TENANT_ADMINS_BEFORE for one in TENANT_ADMINS already); one so
    made who is in none of them any more (or the setting gone) no longer one: staff again only
    if they were before, in TENANT_ADMINS only if they were before. The tenants they administer
    are those they own, by a group or by hand. A platform admin is left alone (run after
    `admin_by`, this follows one it has just unmade), and a tenant admin made by hand (staff, in
    TENANT_ADMINS) is never unmade."""
    if user.is_superuser:
        return
    given = named_in(settings.MLSCHED_AUTH_TENANT_ADMIN_GROUPS, groups)
    marks = [TENANT_ADMINS_BY_SIGN_ON, TENANT_STAFF_BEFORE, TENANT_ADMINS_BEFORE]
    held = {g.name: g for g in user.groups.filter(name__in=[TENANT_ADMINS, *marks])}
    if given and not (user.is_staff and TENANT_ADMINS in held):
        made = [TENANT_ADMINS_BY_SIGN_ON]
        if TENANT_ADMINS_BY_SIGN_ON not in held:  # what they were before the first making
            made += [TENANT_STAFF_BEFORE] if user.is_staff else []
            made += [TENANT_ADMINS_BEFORE] if TENANT_ADMINS in held else []
        user.is_staff = True
        user.save(update_fields=["is_staff"])
        user.groups.add(tenant_admins(), *auth_groups(made))
        history.record(by, [user], f"Made a tenant admin by sign-on group {given[0]}")
    elif not given and TENANT_ADMINS_BY_SIGN_ON in held:
        user.is_staff = TENANT_STAFF_BEFORE in held
        user.save(update_fields=["is_staff"])
        kept = [TENANT_ADMINS] if TENANT_ADMINS_BEFORE in held else []
        user.groups.remove(*(group for name, group in held.items() if name not in kept))
        history.record(by, [user], "No longer a tenant admin: no sign-on group makes them one")


def named_in(setting: str, groups: set[str]) -> list[str]:
    """Those of the user's `groups` a setting's group names (with commas) name, sorted."""
    return sorted(set(group_names(setting)) & groups)


def auth_groups(names: list[str]) -> list[Group]:
    """The auth groups of these names (a sign-on's marks), each made at its first use."""
    return [Group.objects.get_or_create(name=name)[0] for name in names]


def tenant_admins() -> Group:
    """The auth group TENANT_ADMINS, made at its first use with the model permissions a tenant
    admin's pages use (admin_scope.TENANT_ADMIN_PERMISSIONS); as a platform admin changes it
    from then on."""
    group, made = Group.objects.get_or_create(name=TENANT_ADMINS)
    if made:
        group.permissions.set(admin_scope.tenant_admin_permissions())
    return group
