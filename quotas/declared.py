"""Teams declared in a file kept under version control (`manage.py apply_teams`), as Kueue's
ClusterQueues and WorkloadPriorityClasses are kept in YAML: a YAML or JSON document listing
tenants, their settings and their quotas, and priority classes, read and checked into plain
data, compared with the database and applied to it.

A tenant is found by its slug and made if none has it; the fields a file gives are set and
the others kept; quotas, when given, become exactly those listed. A priority class is found by
its name, made if none has it (its value then required), its fields given set, and the tenants
it is open to, when given, exactly those listed; a tenant's `default_priority_class` names one.
Tenants and classes the file does not list are left alone. The whole file is applied in one
transaction, or nothing of it.
"""

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

import yaml
from django.contrib.admin.models import ADDITION, CHANGE
from django.contrib.auth import get_user_model
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, transaction
from django.utils.text import capfirst

from jobs import actions
from jobs.placement.words import counted
from mlsched_site import turns
from quotas import history
from quotas.models import (
    Membership,
    PriorityClass,
    Quota,
    Tenant,
    group_names,
    image_patterns,
)


class Refused(Exception):
    """Why a file cannot be applied: the tenant's slug and the field, then the problem."""


@dataclass(frozen=True)
class Declared:
    """What a file declares: its tenants, and its priority classes."""

    tenants: list["DeclaredTenant"]
    classes: list["DeclaredClass"] = field(default_factory=list)


@dataclass(frozen=True)
class DeclaredClass:
    """One priority class as a file declares it: its fields (only those the file gives), and
    the slugs of the tenants it is open to (None: the file gives none, they stay)."""

    name: str
    fields: dict[str, object]
    tenants: list[str] | None


@dataclass(frozen=True)
class DeclaredTenant:
    """One tenant as a file declares it: its fields as the database stores them (only those
    the file gives), and its quotas by flavor (None: the file gives none, they stay)."""

    slug: str
    fields: dict[str, object]
    quotas: dict[str, dict[str, int | None]] | None
    # The name of its default priority class (None: none); ... (Ellipsis): the file gives none.
    default_class: object = ...
    # Its members given by hand, username: role (None: the file gives none, they stay).
    members: dict[str, str] | None = None


# Reading: a document into DeclaredTenants, every value of the right kind.


def _shown(value: object) -> str:
    """A value read from the file as JSON writes it (null, true, "text"), cut short."""
    return json.dumps(value, ensure_ascii=False, default=str)[:60]


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be text, not {_shown(value)}")
    return value


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be a whole number, not {_shown(value)}")
    return value


def _whole_or_null(value: object) -> int | None:
    if value is None:
        return None
    try:
        return _whole(value)
    except ValueError:
        raise ValueError(f"must be a whole number or null, not {_shown(value)}") from None


def _number(value: object) -> float:
    try:
        number = float(value) if isinstance(value, int | float) else math.nan
    except OverflowError:
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number):
        raise ValueError(f"must be a number, not {_shown(value)}")
    return number


def _money_or_null(value: object) -> Decimal | None:
    """An amount of money to the cent: "1000.00" as text (as an export writes it, exactly), or
    a number; null for none."""
    if value is None:
        return None
    try:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InvalidOperation
        amount = Decimal(value if isinstance(value, str) else repr(value))
        if not amount.is_finite() or int(amount.as_tuple().exponent) < -2:
            raise InvalidOperation  # NaN, Infinity; a part of a cent
        return amount.quantize(Decimal("0.01"))  # InvalidOperation past 28 digits
    except InvalidOperation:
        raise ValueError(
            f'must be an amount to the cent ("1000.00") or null, not {_shown(value)}'
        ) from None


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {_shown(value)}")
    return value


def _lines(value: object) -> str:
    """A list of names or patterns as the tenant's text field keeps them: one a line."""
    if not isinstance(value, list):
        raise ValueError(f"must be a list, not {_shown(value)}")
    for item in value:
        if not isinstance(item, str) or not item.strip() or "\n" in item or "," in item:
            raise ValueError(f"{_shown(item)} is not a name: text without commas or line breaks")
    return "\n".join(item.strip() for item in value)


FIELDS: dict[str, Callable[[object], object]] = {
    "name": _text,
    "fair_share_weight": _number,
    "cohort": _text,
    "max_queued_jobs": _whole_or_null,
    "max_gpus_per_user": _whole_or_null,
    "gpu_hours_per_month": _whole_or_null,
    "gpu_idle_limit_min": _whole_or_null,
    "spend_alert_per_month": _money_or_null,
    "exclusive_allowed": _flag,
    "placements_paused": _text,
    "allowed_images": _lines,
    "owner_groups": _lines,
    "member_groups": _lines,
    "viewer_groups": _lines,
}
# The text fields a file gives as lists, and how each reads its text back into one.
LISTS = {"allowed_images": image_patterns, "owner_groups": group_names,
         "member_groups": group_names, "viewer_groups": group_names}  # fmt: skip
TENANT_KEYS = ("slug", *FIELDS, "default_priority_class", "quotas", "members")
ROLES = tuple(Membership.Role.values)
# A priority class's fields a file may give, each read as the class stores it.
CLASS_FIELDS: dict[str, Callable[[object], object]] = {
    "value": _whole,
    "may_preempt": _flag,
    "preempt_exempt_s": _whole,
    "max_runtime_s": _whole_or_null,
    "default_runtime_s": _whole_or_null,
    "max_gpus_per_user": _whole_or_null,
    "max_gpus": _whole_or_null,
    "fair_share_preemption": _text,
    "description": _text,
}
CLASS_KEYS = ("name", *CLASS_FIELDS, "tenants")
# A quota's amounts the file leaves out are these: its quotas are the file's, whole.
QUOTA_DEFAULTS: dict[str, int | None] = {"guaranteed": 0, "borrow_limit": 0, "lend_limit": None}


class _Loader(yaml.SafeLoader):
    """YAML's safe loader (which reads JSON too), refusing a key given twice in one mapping:
    YAML's own keeps the last one, and a file's earlier line would be dropped unsaid."""


def _mapping_once(loader: _Loader, node: yaml.MappingNode) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            continue  # a number or a list as a key: refused once read, as any unknown key
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_once)


def read(path: str) -> Declared:
    """What the YAML or JSON file at `path` declares, checked. Raises Refused when the file
    cannot be read, is not YAML, or declares something wrongly."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeError) as error:
        raise Refused(
            f"{path}: cannot be read ({getattr(error, 'strerror', '') or error})"
        ) from None
    return parse(text, path)


def parse(text: str, where: str) -> Declared:
    """What a YAML or JSON text declares, checked (`where` names it in a refusal)."""
    try:
        document = yaml.load(text, Loader=_Loader)  # a SafeLoader's subclass
    except yaml.YAMLError as error:
        said = " ".join(str(error).split())  # one line: the parser's spans several
        raise Refused(f"{where}: not YAML nor JSON ({said})") from None
    except (ValueError, OverflowError) as error:  # a timestamp no calendar has: 2026-13-45
        raise Refused(f"{where}: a value YAML cannot read ({error})") from None
    except RecursionError:
        raise Refused(f"{where}: nested too deep") from None
    return declared(document)


def declared(document: object) -> Declared:
    """What a document read from YAML declares, checked (Refused: why not)."""
    lists = ("tenants", "priority_classes")
    if isinstance(document, dict):
        _no_unknown("the file", document, lists)
    if not isinstance(document, dict) or not any(key in document for key in lists):
        raise Refused(
            "the file declares nothing: a mapping with a `tenants:` list, a "
            "`priority_classes:` list or both is expected"
        )
    for key in lists:
        if not isinstance(document.get(key, []), list):
            raise Refused(f"the file's {key}: a list is expected, not {_shown(document[key])}")
    tenants = [_tenant(entry, n) for n, entry in enumerate(document.get("tenants", []), 1)]
    classes = [_class(entry, n) for n, entry in enumerate(document.get("priority_classes", []), 1)]
    listed = (("", "tenant", [t.slug for t in tenants]),
              ("class ", "class", [c.name for c in classes]))  # fmt: skip
    for where, what, names in listed:
        for name, times in Counter(names).items():
            if times > 1:
                raise Refused(f"{where}{name}: listed {times} times: list each {what} once")
    return Declared(tenants, classes)


def _no_unknown(where: str, mapping: dict, known) -> None:
    if unknown := [str(key) for key in mapping if key not in known]:
        raise Refused(
            f"{where}: unknown {'key' if len(unknown) == 1 else 'keys'} {', '.join(unknown)} "
            f"(known: {', '.join(known)})"
        )


def _entry(entry: object, what: str, number: int, key: str, keys, kinds) -> tuple[str, dict]:
    """An entry of one of the file's lists (a `what`, the `number`th), a mapping: its name,
    its `key`, and the fields of `kinds` it gives, read (Refused naming `what`, then the
    name)."""
    if not isinstance(entry, dict):
        raise Refused(
            f"{what} {number} of the file: a mapping of its fields is expected, not {_shown(entry)}"
        )
    name = entry.get(key)
    if not isinstance(name, str) or not name:
        raise Refused(f"{what} {number} of the file: {key}: required, as text")
    where = name if what == "tenant" else f"class {name}"
    _no_unknown(where, entry, keys)
    return name, {k: _read(where, k, value, kinds[k]) for k, value in entry.items() if k in kinds}


def _tenant(entry: object, number: int) -> DeclaredTenant:
    slug, fields = _entry(entry, "tenant", number, "slug", TENANT_KEYS, FIELDS)
    assert isinstance(entry, dict)
    quotas = _quotas(slug, entry["quotas"]) if "quotas" in entry else None
    default = entry.get("default_priority_class", ...)
    if default is not ... and default is not None:
        default = _read(slug, "default_priority_class", default, _text)
    members = _members(slug, entry["members"]) if "members" in entry else None
    return DeclaredTenant(slug, fields, quotas, default, members)


def _members(slug: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise Refused(f"{slug}: members: a mapping of usernames to roles is expected, not "
                      f"{_shown(value)}")  # fmt: skip
    for name, role in value.items():
        if not isinstance(name, str) or role not in ROLES:
            raise Refused(f"{slug}: members: {_shown(name)}: {_shown(role)} is no role "
                          f"({', '.join(ROLES)})")  # fmt: skip
    return value


def _class(entry: object, number: int) -> DeclaredClass:
    name, fields = _entry(entry, "priority class", number, "name", CLASS_KEYS, CLASS_FIELDS)
    assert isinstance(entry, dict)
    where = f"class {name}"
    tenants = None
    if "tenants" in entry:
        tenants = _read(where, "tenants", entry["tenants"], _lines).splitlines()
    return DeclaredClass(name, fields, tenants)


def _read(where: str, key: str, value: object, kind: Callable[[object], object]):
    try:
        return kind(value)
    except ValueError as error:
        raise Refused(f"{where}: {key}: {error}") from None


def _quotas(slug: str, value: object) -> dict[str, dict[str, int | None]]:
    if not isinstance(value, dict):
        raise Refused(f"{slug}: quotas: a mapping of flavors is expected, not {_shown(value)}")
    return {_text_flavor(slug, flavor): _quota(f"{slug}: quota {flavor}", amounts)
            for flavor, amounts in value.items()}  # fmt: skip


def _text_flavor(slug: str, flavor: object) -> str:
    if not isinstance(flavor, str):
        raise Refused(f"{slug}: quota {_shown(flavor)}: a flavor is text (cpu, memory, gpu:<type>)")
    return flavor


def _quota(where: str, amounts: object) -> dict[str, int | None]:
    if not isinstance(amounts, dict):
        raise Refused(f"{where}: a mapping of {', '.join(QUOTA_DEFAULTS)} is expected")
    _no_unknown(where, amounts, QUOTA_DEFAULTS)
    read = dict(QUOTA_DEFAULTS)
    for key, value in amounts.items():
        read[key] = _read(where, key, value, _whole_or_null if key == "lend_limit" else _whole)
    return read


# Applying: DeclaredTenants compared with the database and written to it.


@dataclass
class Outcome:
    """What applying a file did (in a dry run: would do): a line per change, and how many
    tenants were created, changed and left unchanged."""

    lines: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    classes: Counter = field(default_factory=Counter)  # priority classes, as `counts`

    def summary(self) -> str:
        said = _summed(self.counts, "tenant")
        return f"{said}; {_summed(self.classes, 'class', 'classes')}" if self.classes else said


def _summed(counts: Counter, what: str, plural: str = "") -> str:
    return (f"{counted(counts['created'], what, plural)} created, {counts['changed']} changed, "
            f"{counts['unchanged']} unchanged")  # fmt: skip


APPLY_LOCK = 0x6D6C_7466  # advisory lock space: one key, while a teams file is applied


def apply(declared: Declared, by, *, dry_run: bool = False) -> Outcome:
    """Make the tenants, their quotas and the priority classes as declared, in one
    transaction: a Refused (a value the models refuse) leaves the database as it was. The
    tenants first, then the classes (open to tenants the file may make), then the tenants'
    default classes (open to them by then). Each change is written to the platform's history
    as `by`'s, and its consequences are `by`'s too, as a platform admin's edit in the admin has
    them: a narrowing of a tenant's allowed images holds its queued jobs of other images. A dry
    run finds all this out and writes none of it. Files are applied one at a time: one sent
    twice at once is applied, then found as it says."""
    outcome = Outcome()
    kinds: dict[str, str] = {}
    try:
        with transaction.atomic():
            turns.take_turn(APPLY_LOCK, 0)
            for tenant in declared.tenants:
                kinds[tenant.slug], lines = _apply_tenant(tenant, by)
                outcome.lines += [f"{tenant.slug}: {line}" for line in lines]
            for declared_class in declared.classes:
                kind, lines = _apply_class(declared_class, by)
                outcome.classes[kind] += 1
                outcome.lines += [f"class {declared_class.name}: {line}" for line in lines]
            for tenant in declared.tenants:
                if lines := _default_class(tenant, by):
                    outcome.lines += [f"{tenant.slug}: {line}" for line in lines]
                    kinds[tenant.slug] = kinds[tenant.slug].replace("unchanged", "changed")
            outcome.counts.update(kinds.values())
            if dry_run:
                transaction.set_rollback(True)
    except IntegrityError:
        # Another apply, or an admin, made a tenant, quota or class the file makes meanwhile.
        raise Refused(
            "a tenant, quota or priority class the file makes was made meanwhile by another "
            "change: apply the file again"
        ) from None
    return outcome


def _apply_tenant(declared: DeclaredTenant, by) -> tuple[str, list[str]]:
    # Locked as the admin's tenant form locks it: an admin's save and this one take turns.
    tenant = Tenant.objects.select_for_update(no_key=True).filter(slug=declared.slug).first()
    if tenant is None:
        return "created", _create(declared, by)
    lines = _update(tenant, declared, by)
    return ("changed" if lines else "unchanged"), lines


def _create(declared: DeclaredTenant, by) -> list[str]:
    if "name" not in declared.fields:
        raise Refused(f"{declared.slug}: name: required to create the tenant")
    tenant = Tenant(slug=declared.slug, **declared.fields)
    _checked(tenant, declared.slug)
    tenant.save()
    lines, noted = _replace_quotas(tenant, declared.quotas or {})
    if declared.members is not None:
        member_lines, member_noted = _replace_members(tenant, declared.members)
        lines, noted = lines + member_lines, noted + member_noted
    _record(by, tenant, ADDITION, [{"added": {}}, *noted])
    return ["created", *lines]


def _update(tenant: Tenant, declared: DeclaredTenant, by) -> list[str]:
    before = {name: getattr(tenant, name) for name in declared.fields}
    changed = [name for name, value in declared.fields.items()
               if _compared(name, value) != _compared(name, before[name])]  # fmt: skip
    for name in changed:
        setattr(tenant, name, declared.fields[name])
    if changed:
        _checked(tenant, declared.slug)
        tenant.save(update_fields=changed)
    lines = [f"{name} {_said(name, before[name])} -> {_said(name, getattr(tenant, name))}"
             for name in changed]  # fmt: skip
    noted = [{"changed": {"fields": [_label(Tenant, name) for name in changed]}}]
    noted = noted if changed else []
    for rows, replace in ((declared.quotas, _replace_quotas), (declared.members, _replace_members)):
        if rows is not None:
            row_lines, row_noted = replace(tenant, rows)
            lines, noted = lines + row_lines, noted + row_noted
    if noted:
        _record(by, tenant, CHANGE, noted)
    return lines + _consequences(tenant, changed, by)


def _replace_members(tenant: Tenant, wanted: dict[str, str]) -> tuple[list[str], list[dict]]:
    """Make the tenant's memberships given by hand exactly `wanted` (username: role): those
    from sign-on groups stay, unless the file names their user, whose membership becomes the
    file's, as an admin's edit makes it; what that did, in lines and in the history."""
    users = {u.get_username(): u for u in get_user_model().objects.filter(username__in=wanted)}
    if missing := [name for name in wanted if name not in users]:
        raise Refused(f"{tenant.slug}: members: no user {missing[0]!r} (sign-on makes accounts "
                      "at a first login; a platform admin, in the admin)")  # fmt: skip
    held = {m.user.get_username(): m for m in tenant.memberships.select_related("user")}
    lines, noted = [], []
    for name, membership in sorted(held.items()):
        if name not in wanted and not membership.from_group:
            lines.append(f"member {name} removed")
            noted.append({"deleted": {"name": "membership", "object": str(membership)}})
            membership.delete()
    for name, role in wanted.items():
        membership = held.get(name)
        if membership is None:
            made = Membership.objects.create(tenant=tenant, user=users[name], role=role)
            lines.append(f"member {name} added ({role})")
            noted.append({"added": {"name": "membership", "object": str(made)}})
        elif (membership.role, membership.from_group) != (role, ""):
            lines.append(f"member {name} {membership.role} -> {role}" + (
                f" (was from sign-on group {membership.from_group})" if membership.from_group
                else ""))  # fmt: skip
            membership.role, membership.from_group = role, ""
            membership.save(update_fields=["role", "from_group"])
            noted.append({"changed": {"name": "membership", "object": str(membership),
                                      "fields": ["Role"]}})  # fmt: skip
    return lines, noted


def _compared(name: str, value: object) -> object:
    # A text as the admin may have saved it ("\r\n", blank lines) is the list it reads as.
    return LISTS[name](str(value)) if name in LISTS else value


def _said(name: str, value: object) -> str:
    # An amount of money as a file writes it: "1250.50".
    return json.dumps(_compared(name, value), ensure_ascii=False, default=str)


def _label(model, name: str) -> str:
    """A field as the admin's history names it: its form label."""
    return capfirst(model._meta.get_field(name).verbose_name)


def _replace_quotas(tenant: Tenant, wanted: dict) -> tuple[list[str], list[dict]]:
    """Make the tenant's quota rows exactly `wanted`; what that did, in lines and in the
    admin's history. Rows of other flavors go first: a flavor respelled (gpu:a100 as gpu:A100)
    takes the old one's place."""
    stored = {quota.flavor: quota for quota in tenant.quotas.all()}
    lines, history = [], []
    for flavor in sorted(set(stored) - set(wanted)):
        stored[flavor].delete()
        lines.append(f"quota {flavor} removed")
        history.append({"deleted": {"name": "quota", "object": f"{tenant}: {flavor}"}})
    for flavor, amounts in wanted.items():
        quota = stored.get(flavor)
        if quota is None:
            said, noted = _add_quota(tenant, flavor, amounts)
        else:
            said, noted = _change_quota(quota, amounts)
        lines, history = lines + said, history + noted
    return lines, history


def _add_quota(tenant: Tenant, flavor: str, amounts: dict) -> tuple[list[str], list[dict]]:
    quota = Quota(tenant=tenant, flavor=flavor, **amounts)
    _checked(quota, tenant.slug, f"quota {flavor}: ")
    quota.save()
    given = ", ".join(f"{name} {json.dumps(value)}" for name, value in amounts.items())
    return [f"quota {flavor} added ({given})"], [{"added": {"name": "quota", "object": str(quota)}}]


def _change_quota(quota: Quota, amounts: dict) -> tuple[list[str], list[dict]]:
    changed = {name: value for name, value in amounts.items() if getattr(quota, name) != value}
    if not changed:
        return [], []
    lines = [f"quota {quota.flavor} {name} {json.dumps(getattr(quota, name))} -> "
             f"{json.dumps(value)}" for name, value in changed.items()]  # fmt: skip
    for name, value in changed.items():
        setattr(quota, name, value)
    _checked(quota, quota.tenant.slug, f"quota {quota.flavor}: ")
    quota.save(update_fields=list(changed))
    fields = [_label(Quota, name) for name in changed]
    return lines, [{"changed": {"name": "quota", "object": str(quota), "fields": fields}}]


def _checked(row: Tenant | Quota | PriorityClass, slug: str, what: str = "") -> None:
    """full_clean, a refusal naming the tenant (or the class), the row and the field."""
    try:
        row.full_clean()
    except ValidationError as error:
        raise Refused(f"{slug}: {what}{_problems(error)}") from None


def _problems(error: ValidationError) -> str:
    if not hasattr(error, "error_dict"):
        return " ".join(error.messages)
    return "; ".join(
        " ".join(messages) if name == NON_FIELD_ERRORS else f"{name}: {' '.join(messages)}"
        for name, messages in error.message_dict.items()
    )


def _record(by, row: Tenant | PriorityClass, flag: int, said: list[dict]) -> None:
    """Into the platform's history (the row's History page, the index's Recent actions), as
    the admin writes an edit of a tenant and its quota rows, or of a priority class."""
    history.record(by, [row], said, flag)


def _apply_class(declared: DeclaredClass, by) -> tuple[str, list[str]]:
    where = f"class {declared.name}"
    found = PriorityClass.objects.select_for_update().filter(name=declared.name).first()
    made = found is None
    if made and "value" not in declared.fields:
        raise Refused(f"{where}: value: required to create the class")
    row = found or PriorityClass(name=declared.name)
    before = {name: getattr(row, name) for name in declared.fields}
    changed = [name for name, value in declared.fields.items()
               if made or before[name] != value]  # fmt: skip
    for name in changed:
        setattr(row, name, declared.fields[name])
    if changed or made:
        _checked(row, where)
        row.save() if made else row.save(update_fields=changed)
    lines = ["created"] if made else [
        f"{name} {json.dumps(before[name])} -> {json.dumps(getattr(row, name))}"
        for name in changed
    ]  # fmt: skip
    if declared.tenants is not None and (said := _open_to(row, declared.tenants, where)):
        lines += said
        changed.append("tenants")
    if made:
        _record(by, row, ADDITION, [{"added": {}}])
    elif changed:
        labels = [_label(PriorityClass, name) for name in changed]
        _record(by, row, CHANGE, [{"changed": {"fields": labels}}])
    return ("created" if made else "changed" if changed else "unchanged"), lines


def _open_to(row: PriorityClass, slugs: list[str], where: str) -> list[str]:
    """Make the tenants the class is open to exactly those of `slugs`; the line saying so."""
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in=slugs)}
    if missing := [slug for slug in slugs if slug not in tenants]:
        raise Refused(f"{where}: tenants: no tenant {missing[0]!r}")
    before = sorted(row.tenants.values_list("slug", flat=True))
    if before == sorted(slugs):
        return []
    row.tenants.set(tenants.values())
    return [f"tenants {json.dumps(before)} -> {json.dumps(sorted(slugs))}"]


def _default_class(declared: DeclaredTenant, by) -> list[str]:
    """The tenant's default priority class as declared, once the classes are; its line."""
    if declared.default_class is ...:
        return []
    tenant = Tenant.objects.select_related("default_priority_class").get(slug=declared.slug)
    before = tenant.default_priority_class
    named = declared.default_class
    if (before.name if before else None) == named:
        return []
    wanted = None
    if named is not None:
        wanted = PriorityClass.objects.filter(name=named).first()
        if wanted is None:
            raise Refused(f"{declared.slug}: default_priority_class: no class {named!r}")
    tenant.default_priority_class = wanted
    _checked(tenant, declared.slug)
    tenant.save(update_fields=["default_priority_class"])
    _record(by, tenant, CHANGE, [{"changed": {"fields": [
        _label(Tenant, "default_priority_class")]}}])  # fmt: skip
    return [f"default_priority_class {json.dumps(before.name if before else None)} -> "
            f"{json.dumps(named)}"]  # fmt: skip


def _consequences(tenant: Tenant, changed: list[str], by) -> list[str]:
    """What the admin does when a platform admin saves these fields changed, done and said."""
    followed = actions.settings_changed(tenant, changed, by.get_username())
    return _held(followed.held) + _waiting(followed.waiting_whole)


def _held(held: int) -> list[str]:
    if not held:
        return []
    return [f"held {counted(held, 'queued job')} whose image its allowed images no longer let "
            "through"]  # fmt: skip


def _waiting(waiting: int) -> list[str]:
    if not waiting:
        return []
    wait = "waits" if waiting == 1 else "wait"
    return [f"{counted(waiting, 'queued exclusive job')} {wait} until made shared; running ones "
            "run on"]  # fmt: skip
