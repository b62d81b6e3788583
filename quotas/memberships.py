"""A team's owners manage its members themselves, on the portal's Teams page, without the
admin's pages (which need a platform admin to make them staff): add a user by name, change a
member's role, remove a member. Memberships a sign-on group gives are the group's (its users
follow it at their logins): an owner changes none of them. A team always keeps an owner: the
last one is neither removed nor made something else. Each change is in the platform's history
as the owner's (quotas.history)."""

from django.contrib.auth import get_user_model
from django.db import transaction

from quotas import history
from quotas.models import Membership, Tenant

ROLES = tuple(Membership.Role.values)


class Refused(Exception):
    """Why a change of a team's members is refused: the form's field, then the reason."""

    def __init__(self, field: str, why: str):
        super().__init__(why)
        self.field = field


class NotMember(Refused):
    """The change names no member of the team."""


def owns(user, tenant: Tenant) -> bool:
    return tenant.memberships.filter(user=user, role=Membership.Role.OWNER).exists()


@transaction.atomic
def add(tenant: Tenant, username: str, role: str, by) -> Membership:
    """Make the user named `username` a member of the team, in `role`."""
    _locked(tenant)
    if role not in ROLES:
        raise Refused("role", f"One of {', '.join(ROLES)}.")
    users = get_user_model()._default_manager
    user = users.filter(**{users.model.USERNAME_FIELD: username.strip()}).first()
    if user is None:
        raise Refused("username", f"No user is named {username.strip()[:150]!r}: they sign in "
                      "once first, or a platform admin makes their account.")  # fmt: skip
    if tenant.memberships.filter(user=user).exists():
        raise Refused("username", f"{user.get_username()} is a member already.")
    made = Membership.objects.create(tenant=tenant, user=user, role=role)
    history.record(by, [made], f"Added on the portal's Teams page, as {role}", history.ADDITION)
    return made


@transaction.atomic
def change(tenant: Tenant, username: str, role: str | None, by) -> Membership | None:
    """Make the member `username` of the team `role`; None: remove them. Returns the
    membership (None once removed)."""
    _locked(tenant)
    membership = tenant.memberships.select_related("user").filter(user__username=username).first()
    if membership is None:
        raise NotMember("username", f"{username[:150]!r} is no member of {tenant.slug}.")
    if role is not None and role not in ROLES:
        raise Refused("role", f"One of {', '.join(ROLES)}.")
    if membership.from_group:
        group = membership.from_group
        raise Refused("username", f"{username} is a member by the sign-on group {group}, "
                      "which a platform admin names on the team.")  # fmt: skip
    owners = tenant.memberships.filter(role=Membership.Role.OWNER).count()
    last_owner = membership.role == Membership.Role.OWNER and owners == 1
    if last_owner and role != Membership.Role.OWNER:
        raise Refused("username", f"{username} is the team's last owner: make another owner "
                      "first.")  # fmt: skip
    if role is None:
        history.record(by, [membership], "Removed on the portal's Teams page", history.DELETION)
        membership.delete()
        return None
    if membership.role != role:
        was, membership.role = membership.role, role
        membership.save(update_fields=["role"])
        history.record(by, [membership], f"Made {role} (was {was}) on the portal's Teams page")
    return membership


def _locked(tenant: Tenant) -> None:
    """The team's row locked: two owners changing its members take turns, so neither removes
    the other as the last owner at once."""
    Tenant.objects.select_for_update().get(pk=tenant.pk)
