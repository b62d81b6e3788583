"""SCIM 2.0 provisioning (RFC 7643, RFC 7644) as Okta and Microsoft Entra ID push it, where
MLSCHED_SCIM_TOKEN is set (quotas/scim_views.py is its HTTP side, under /scim/v2/): the
identity provider makes, changes, deactivates and deletes the users' accounts and pushes their
groups, so that someone who leaves is shut out at once and teams follow a change of groups
without waiting for its users' next login.

The Users SCIM sees are the accounts without a usable password (a sign-on's, or one it made)
but those it deleted, the history's system actors and guardian's anonymous user: a password
account (a platform admin's own login) is never SCIM's, neither read nor changed, and a push of
its name is a 409. SCIM makes an account without a usable password, as a sign-on does.
Deactivated (`active` false, by PUT, PATCH or DELETE), an account's API tokens are revoked and
its OpenID Connect sessions ended; every other session of it is anonymous from its next
request, as Django's authentication middleware gets no user for an inactive account
(ModelBackend, and the sign-ons' backends built on it, refuse one), though a job page's live
stream opened before runs on until it closes. Its running jobs run on, as when a platform admin
deactivates someone by hand. Reactivated, it signs in again; its tokens stay revoked. Deleted,
it is deactivated and taken out of its groups, and SCIM sees it no more (a 404): the row stays,
for the jobs and the history naming it, and a push of its name makes it again. Its memberships
given by hand stay.

Groups are `ScimGroup`s (quotas/scim_groups.py). Whenever a user's groups change (a group's
members, its name, the group deleted), their teams and platform and tenant admin rights follow
the groups they are in now (`follow`, `sign_on.join_groups`), in the same transaction; a
sign-on's groups are not followed while SCIM is on (`sign_on.groups_pushed`). Every change is
in the platform's history as the system actor `system:scim`, its message naming SCIM.

Attributes this platform keeps not (title, phone numbers, the enterprise extension's, which
the providers map by default) are ignored, as is a password: an account SCIM makes never has
one, as is a user's `groups` pushed (read-only: the groups they are in, which a group's
members set). A user's `userName` and a group's `displayName` are compared in any case (RFC
7643's caseExact false), an `externalId` as written. Lists are filtered, sorted and their
attributes chosen by quotas/scim_query.py."""

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Prefetch
from django.utils import timezone
from guardian.conf import settings as guardian

from quotas import history, oidc_sessions, tokens
from quotas.models import ApiToken, OidcSession, ScimGroup, ScimUser
from quotas.sign_on import NAME_LENGTH, is_username, join_groups

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
MAX_RESULTS = 200  # a page's most resources (the ServiceProviderConfig's filter.maxResults)
ACTOR = "scim"  # the history's system actor, system:scim
NAME_CHARS = 150  # Django's first_name's and last_name's
EMAIL_CHARS = 254
EXTERNAL_ID_CHARS = ScimUser._meta.get_field("external_id").max_length
OPS = ("add", "remove", "replace")
Operations = list[tuple[str, str | None, object]]  # a PatchOp's: each op, path and value
WORK_EMAIL = 'emails[type eq "work"].value'  # a path as `path_key` writes it
# A SCIM attribute the history names for an account's field.
SAID = {"username": "userName", "first_name": "name.givenName", "last_name": "name.familyName",
        "email": "emails", "external_id": "externalId"}  # fmt: skip


class ScimError(Exception):
    """A request SCIM refuses: its HTTP `status`, RFC 7644's `scim_type` (a 400's or a 409's)
    and a `detail` naming what is wrong."""

    def __init__(self, status: int, detail: str, scim_type: str = ""):
        super().__init__(detail)
        self.status, self.detail, self.scim_type = status, detail, scim_type


def invalid(detail: str, scim_type: str = "invalidValue") -> ScimError:
    return ScimError(400, detail, scim_type)


# Reading what a push says.


def lowered(document: dict) -> dict:
    """A JSON object's attributes by their names in lower case: SCIM's names are in any case."""
    return {name.lower(): value for name, value in document.items()}


def shown(value) -> str:
    """A JSON value as a refusal names it, short."""
    return json.dumps(value)[:100]


def storable(value: str) -> bool:
    """Whether PostgreSQL keeps the text: no NUL, no unpaired surrogate."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def text(value, attribute: str, most: int) -> str:
    """A string attribute's value ("" for null or none)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise invalid(f"{attribute} is a string, not {shown(value)}.")
    if len(value) > most:
        raise invalid(f"{attribute} has at most {most} characters.")
    if not storable(value):
        raise invalid(f"{attribute} holds a NUL or an unpaired surrogate.")
    return value


def boolean(value, attribute: str) -> bool:
    """A boolean, or "True" or "False", as Entra ID sends one at times."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise invalid(f"{attribute} is true or false, not {shown(value)}.")


def username(value) -> str:
    name = text(value, "userName", NAME_LENGTH)
    if not name:
        raise invalid("userName is required.")
    if not is_username(name):
        raise invalid(f"userName {name!r} is no username here: letters, digits and @ . + - _ "
                      f"alone, at most {NAME_LENGTH}.")  # fmt: skip
    return name


def address(value) -> str:
    email = text(value, "emails.value", EMAIL_CHARS).strip()
    if email:
        try:
            validate_email(email)
        except ValidationError:
            raise invalid(f"emails: {email[:100]!r} is no email address.") from None
    return email


def primary_email(value) -> str:
    """The address an `emails` list gives: its primary one's, else its work one's, else its
    first's ("" for none)."""
    if value is None:
        return ""
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise invalid("emails is a list of objects, each with its value.")
    items = [lowered(item) for item in value]
    chosen = next((i for i in items if i.get("primary") in (True, "true", "True")), None)
    chosen = chosen or next((i for i in items if i.get("type") == "work"), None)
    return address((chosen or items[0]).get("value")) if items else ""


def user_id(value) -> int:
    """A user's id as a push writes it (a string of digits, or a number)."""
    if isinstance(value, int) and not isinstance(value, bool):
        written = str(value)
    elif isinstance(value, str):
        written = value.strip()
    else:
        raise invalid(f"A member's value is a user's id, not {shown(value)}.")
    if not re.fullmatch(r"[0-9]{1,18}", written):
        raise invalid(f"A member's value is a user's id, not {shown(value)}.")
    return int(written)


def path_key(path: str, schema: str) -> str:
    """A PATCH path as compared here: the schema's URN before it dropped, in lower case, its
    spaces one ("emails[type eq "work"].value")."""
    if path.lower().startswith(schema.lower() + ":"):
        path = path[len(schema) + 1 :]
    return " ".join(path.lower().replace("[ ", "[").replace(" ]", "]").split())


def operations(body: dict) -> Operations:
    """A PatchOp's operations, each its op (add, remove or replace, in lower case: Entra ID
    writes them capitalized), its path (None: none; its value is then an object of attributes)
    and its value."""
    listed = lowered(body).get("operations")
    if not isinstance(listed, list) or not listed:
        raise invalid("A PatchOp's Operations is a list of operations.", "invalidSyntax")
    read = []
    for operation in listed:
        if not isinstance(operation, dict):
            raise invalid(f"An operation is an object, not {shown(operation)}.", "invalidSyntax")
        operation = lowered(operation)
        op, path, value = operation.get("op"), operation.get("path"), operation.get("value")
        if not isinstance(op, str) or op.lower() not in OPS:
            raise invalid(f"An operation's op is add, remove or replace, not {shown(op)}.",
                          "invalidSyntax")  # fmt: skip
        if path is not None and (not isinstance(path, str) or not storable(path)):
            raise invalid(f"An operation's path is a string, not {shown(path)}.", "invalidPath")
        if path is None and op.lower() == "remove":
            raise invalid("A remove names the path it removes.", "noTarget")
        if path is None and not isinstance(value, dict):
            raise invalid("An operation without a path has an object of attributes for its "
                          "value.", "invalidValue")  # fmt: skip
        read.append((op.lower(), path, value))
    return read


# Users


@dataclass
class Account:
    """What a push says of a user's account, each field None where it says nothing."""

    username: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    email: str | None = None
    external_id: str | None = None
    active: bool | None = None


# A User attribute's path, as `path_key` writes it: the Account field it sets, how its value is
# read (a value None: the attribute removed).
USER_ATTRIBUTES = {
    "username": ("username", username),
    "active": ("active", lambda value: boolean(value, "active")),
    "name.givenname": ("first_name", lambda value: text(value, "name.givenName", NAME_CHARS)),
    "name.familyname": ("last_name", lambda value: text(value, "name.familyName", NAME_CHARS)),
    "emails": ("email", primary_email),
    WORK_EMAIL: ("email", address),
    "externalid": ("external_id", lambda value: text(value, "externalId", EXTERNAL_ID_CHARS)),
}


def set_attribute(account: Account, path: str, value) -> None:
    """Write into `account` what a push gives the user's attribute at `path` (None: removed);
    `name`'s sub-attributes, those given. An attribute kept not here is ignored."""
    key = path_key(path, USER)
    if key == "name" and isinstance(value, dict):
        for part, given in value.items():
            set_attribute(account, f"name.{part}", given)
    elif key == "name" and value is None:
        account.first_name = account.last_name = ""
    elif key in USER_ATTRIBUTES:
        field, read = USER_ATTRIBUTES[key]
        setattr(account, field, read(value))


def account_of(resource: dict, whole: bool) -> Account:
    """What a User resource (a POST's, a PUT's: `whole`, where what it leaves out is removed,
    `active` but left as it is) says of the account."""
    account = Account()
    for name, value in resource.items():
        set_attribute(account, name, value)
    if whole:
        if account.username is None:
            raise invalid("userName is required.")
        for field in ("first_name", "last_name", "email", "external_id"):
            if getattr(account, field) is None:
                setattr(account, field, "")
    return account


def patched(listed: Operations) -> Account:
    """What a PatchOp's operations say of the account, the last one's word on an attribute
    kept (an add is a replace: every attribute kept here holds one value)."""
    account = Account()
    for op, path, value in listed:
        if path is None:
            for name, given in value.items():
                set_attribute(account, name, given)
        else:
            set_attribute(account, path, None if op == "remove" else value)
    return account


def users():
    """The accounts SCIM sees (see the module)."""
    return (
        get_user_model()
        ._default_manager.filter(password__startswith=UNUSABLE_PASSWORD_PREFIX)
        .exclude(scim__deleted=True)
        .exclude(username__startswith=history.SYSTEM)
        .exclude(username=guardian.ANONYMOUS_USER_NAME)  # guardian's, for its anonymous rights
        .select_related("scim")
        .order_by("pk")
    )


def user_with(pk: str, locked: bool = False):
    """The user SCIM sees of id `pk` (a 404 for none); `locked`: their row, for a change."""
    rows = users().filter(pk=int(pk)) if re.fullmatch(r"[0-9]{1,18}", pk) else users().none()
    user = (rows.select_for_update(of=("self",)) if locked else rows).first()
    if user is None:
        raise ScimError(404, f"No user {pk[:40]!r}.")
    return user


def named(name: str):
    """The accounts of that name, in any case."""
    return get_user_model()._default_manager.filter(username__iexact=name)


@transaction.atomic
def create_user(account: Account):
    """Make the account a POST describes, without a usable password, active unless it says
    not; or make again one SCIM deleted. A 409 for a name another account has (whatever its
    case): a password account's above all, which SCIM never takes over."""
    name = account.username or ""
    found = named(name).select_related("scim").first()
    kept = getattr(found, "scim", None)
    if found is None:
        try:
            with transaction.atomic():
                user = get_user_model()._default_manager.create_user(name)  # no password
        except IntegrityError:
            raise taken(name) from None
        said = "SCIM: made"
    elif kept is not None and kept.deleted and not found.has_usable_password():
        user, said = found, "SCIM: made again, once deleted"
    else:
        raise taken(name, found)
    account.active = True if account.active is None else account.active
    changed(user, account, history.system_actor(ACTOR), said, history.ADDITION)
    return user


def taken(name, user=None) -> ScimError:
    why = (" by an account that signs in with a password, which SCIM never takes over"
           if user is not None and user.has_usable_password() else "")  # fmt: skip
    return ScimError(409, f"userName {name!r} is taken{why}.", "uniqueness")


@transaction.atomic
def change_user(pk: str, account: Account):
    """Give the user of id `pk` what a PUT or a PATCH says of their account."""
    user = user_with(pk, locked=True)
    changed(user, account, history.system_actor(ACTOR))
    return user


def changed(user, account: Account, actor, said: str = "", flag: int = history.CHANGE) -> None:
    """Give the account what the push says (a field None: left as it is), SCIM's from then
    on; deactivated or reactivated as it says. In the history: `said`, else the attributes
    changed."""
    other = named(account.username).exclude(pk=user.pk).first() if account.username else None
    if other is not None:
        raise taken(account.username, other)
    fields = [field for field in ("username", "first_name", "last_name", "email")
              if getattr(account, field) not in (None, getattr(user, field))]  # fmt: skip
    for field in fields:
        setattr(user, field, getattr(account, field))
    if fields:
        try:
            with transaction.atomic():
                user.save(update_fields=fields)
        except IntegrityError:
            raise taken(account.username) from None
    kept, _ = ScimUser.objects.get_or_create(user=user)
    if account.external_id not in (None, kept.external_id):
        kept.external_id = account.external_id
        fields.append("external_id")
    kept.deleted, kept.modified = False, timezone.now()
    kept.save()
    said = said or (f"SCIM: changed {', '.join(SAID[f] for f in fields)}" if fields else "")
    if said:
        history.record(actor, [user], said, flag)
    if account.active is False and let_in(user):
        deactivate(user, actor)
    elif account.active and not user.is_active:
        user.is_active = True
        user.save(update_fields=["is_active"])
        history.record(actor, [user], "SCIM: reactivated (API tokens revoked stay so)")


def let_in(user) -> bool:
    """Whether anything still lets the user in: their account active, an API token of theirs
    (one a platform admin's deactivation by hand left), an OpenID Connect session."""
    return user.is_active or user.api_tokens.exists() or user.oidc_sessions.exists()


def deactivate(user, actor) -> None:
    """Shut the user out: inactive, their API tokens revoked, their OpenID Connect sessions
    ended (their other sessions are anonymous from their next request: see the module)."""
    user.is_active = False
    user.save(update_fields=["is_active"])
    held = list(ApiToken.objects.filter(user=user).select_related("user"))
    for token in held:
        tokens.revoke_token(token, actor, why="SCIM deactivated them")
    ended = oidc_sessions.ended(OidcSession.objects.filter(user=user))
    history.record(actor, [user], f"SCIM: deactivated ({len(held)} API tokens revoked, "
                   f"{ended} OpenID Connect sessions ended)")  # fmt: skip


@transaction.atomic
def delete_user(pk: str) -> None:
    """Delete the user of id `pk` as SCIM sees them: deactivated, out of their groups (their
    teams and platform admin rights following), the account kept for the jobs and the
    history naming it, SCIM seeing it no more."""
    user, actor = user_with(pk, locked=True), history.system_actor(ACTOR)
    groups = list(user.scim_groups.all())
    for group in groups:
        history.record(actor, [user], f"SCIM: removed from group {group}: the user deleted")
    user.scim_groups.clear()
    ScimGroup.objects.filter(pk__in=[group.pk for group in groups]).update(modified=timezone.now())
    if let_in(user):
        deactivate(user, actor)
    ScimUser.objects.update_or_create(user=user, defaults={"deleted": True,
                                                           "modified": timezone.now()})  # fmt: skip
    follow({user.pk}, actor)
    history.record(actor, [user], "SCIM: deleted (the account kept, inactive)")


def follow(user_ids: set[int], actor) -> None:
    """Each user's teams and admin rights as the groups they are in now make them
    (`sign_on.join_groups`), one user after the other by id: concurrent pushes lock their
    memberships in one order."""
    names = defaultdict(set)
    through = ScimGroup.members.through.objects.filter(user_id__in=user_ids)
    for user_pk, name in through.values_list("user_id", "scimgroup__display_name"):
        names[user_pk].add(name)
    for user in get_user_model()._default_manager.filter(pk__in=user_ids).order_by("pk"):
        join_groups(user, names[user.pk], by=actor)


# What SCIM answers


def when(at) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def user_resource(user, base: str, groups: bool = True) -> dict:
    """The user as SCIM reads them (`base`: the /scim/v2 URL), with the groups they are in
    where `groups` (read-only, RFC 7643 §4.1.2; prefetched for a list: `with_groups`)."""
    kept = getattr(user, "scim", None)
    resource = {
        "schemas": [USER],
        "id": str(user.pk),
        "userName": user.username,
        "active": user.is_active,
        "name": {"givenName": user.first_name, "familyName": user.last_name},
        "emails": [{"value": user.email, "primary": True, "type": "work"}] if user.email else [],
        "meta": {
            "resourceType": "User",
            "created": when(user.date_joined),
            "lastModified": when(kept.modified if kept else user.date_joined),
            "location": f"{base}/Users/{user.pk}",
        },
    }
    if kept and kept.external_id:
        resource["externalId"] = kept.external_id
    if groups:
        resource["groups"] = [
            {"value": str(group.pk), "display": group.display_name,
             "$ref": f"{base}/Groups/{group.pk}"}
            for group in user.scim_groups.all()
        ]  # fmt: skip
    return resource


def with_groups(rows):
    """Users with the groups they are in, in one query for them all."""
    return rows.prefetch_related(Prefetch("scim_groups", queryset=ScimGroup.objects.order_by("pk")))


# Lists


def whole(written: str | None, parameter: str, default: int) -> int:
    if written is None or written == "":
        return default
    if not re.fullmatch(r"-?[0-9]{1,30}", written.strip()):
        raise invalid(f"{parameter} is a whole number, not {written[:40]!r}.")
    return int(written)


def page(rows, params) -> tuple[list, int, int]:
    """The page of `rows` the query asks for: `startIndex` (from 1; less is 1) and `count`
    (MAX_RESULTS at most; less than 0 is 0); the page, the rows' total and its start."""
    start = max(whole(params.get("startIndex"), "startIndex", 1), 1)
    count = min(max(whole(params.get("count"), "count", MAX_RESULTS), 0), MAX_RESULTS)
    total = rows.count()
    return (list(rows[start - 1 : start - 1 + count]) if start <= total else []), total, start
