"""What a SCIM read asks for beyond the resources themselves (RFC 7644 §3.4.2, §3.9): which
of them (`filter`, read by quotas/scim_filter.py and made here into one database query,
never a test of every row in Python), in which order (`sortBy`, `sortOrder`) and which of
their attributes (`attributes`, `excludedAttributes`).

Each resource type has a table of the attributes filters compare and lists sort by (`USERS`,
`GROUPS`): where the value is kept, its type, and whether it is compared in any case (RFC
7643's caseExact false: userName, names, emails, displayName) or as written (externalId,
ids). A multi-valued attribute (a user's emails and groups, a group's members) meets a
condition where one of its values does. A comparison holds only where the attribute has a
value (`not (...)` for the rest); `eq null` is "has none". A filter naming what a resource
has not, or comparing a value of the wrong type (`active co "t"`), is a 400
invalidFilter naming it, as RFC 7644 asks. Lists sort in any case, a resource without the
value last (first, descending), and always end on the id, so that pages do not overlap."""

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from functools import reduce
from operator import and_, or_

from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, Lower, NullIf, TruncSecond
from django.db.models.lookups import (
    Contains,
    EndsWith,
    Exact,
    GreaterThan,
    GreaterThanOrEqual,
    IContains,
    IEndsWith,
    IExact,
    IsNull,
    IStartsWith,
    LessThan,
    LessThanOrEqual,
    StartsWith,
)
from django.utils.dateparse import parse_datetime

from quotas import scim
from quotas.models import ScimGroup
from quotas.scim import GROUP, USER, invalid
from quotas.scim_filter import Compare, FilterError, Junction, Node, Not, Present, Within, parse

STRING, ID, BOOLEAN, DATETIME = "string", "id", "boolean", "dateTime"
ALL, NONE = Q(pk__isnull=False), Q(pk__isnull=True)
ORDERS = {"gt": GreaterThan, "ge": GreaterThanOrEqual, "lt": LessThan, "le": LessThanOrEqual}
EXACT = {"eq": Exact, "ne": Exact, "co": Contains, "sw": StartsWith, "ew": EndsWith}
IN_ANY_CASE = {"eq": IExact, "ne": IExact, "co": IContains, "sw": IStartsWith, "ew": IEndsWith}
ALWAYS = {"id", "schemas"}  # returned whatever `attributes` and `excludedAttributes` say
THROUGH = ScimGroup.members.through


@dataclass(frozen=True)
class Attribute:
    """Where an attribute's value is kept (a lookup path from the resource's row, or an
    expression), its type and whether it is compared as written."""

    field: str | Coalesce
    kind: str = STRING
    case_exact: bool = False

    def expression(self):
        return F(self.field) if isinstance(self.field, str) else self.field


@dataclass(frozen=True)
class Constant:
    """A sub-attribute every value has alike (an email's type "work"), compared here."""

    value: str | bool


@dataclass(frozen=True)
class Multi:
    """A multi-valued attribute: its values' sub-attributes, how a condition on one value
    becomes one on the resource (`scope`), and the sub-attribute lists sort it by."""

    attributes: dict[str, Attribute | Constant]
    scope: Callable[[Q], Q]
    sort: Attribute | None = None


@dataclass(frozen=True)
class Resource:
    """What filters and sorts read of a resource type: its schema's URN (which a path may
    begin with), its single-valued attributes by path, its multi-valued ones."""

    schema: str
    attributes: dict[str, Attribute | Constant]
    multis: dict[str, Multi]


def present(attribute: Attribute | Constant) -> Q:
    """Whether the attribute has a value: never SQL's unknown, so `not` is its complement."""
    if isinstance(attribute, Constant):
        return ALL
    lhs = attribute.expression()
    condition = Q(IsNull(lhs, False))
    return condition & ~Q(Exact(lhs, "")) if attribute.kind == STRING else condition


def users_in_groups(condition: Q) -> Q:
    """The users in a group that meets `condition`."""
    groups = ScimGroup.objects.filter(condition)
    return Q(pk__in=THROUGH.objects.filter(scimgroup__in=groups).values("user_id"))


def groups_with_members(condition: Q) -> Q:
    """The groups with a member (a user SCIM sees) that meets `condition`."""
    members = scim.users().filter(condition)
    return Q(pk__in=THROUGH.objects.filter(user__in=members).values("scimgroup_id"))


EMAIL = Attribute("email")
USERS = Resource(
    USER,
    {
        "id": Attribute("pk", ID),
        "userName": Attribute("username"),
        "name.givenName": Attribute("first_name"),
        "name.familyName": Attribute("last_name"),
        "active": Attribute("is_active", BOOLEAN),
        "externalId": Attribute("scim__external_id", case_exact=True),
        "meta.created": Attribute("date_joined", DATETIME),
        "meta.lastModified": Attribute(Coalesce("scim__modified", "date_joined"), DATETIME),
    },
    {
        "emails": Multi(
            {"value": EMAIL, "type": Constant("work"), "primary": Constant(True)},
            lambda condition: present(EMAIL) & condition,  # one address, on the user's row
            sort=EMAIL,
        ),
        "groups": Multi(
            {"value": Attribute("pk", ID), "display": Attribute("display_name")},
            users_in_groups,
        ),
    },
)
GROUPS = Resource(
    GROUP,
    {
        "id": Attribute("pk", ID),
        "displayName": Attribute("display_name"),
        "externalId": Attribute("external_id", case_exact=True),
        "meta.created": Attribute("created", DATETIME),
        "meta.lastModified": Attribute("modified", DATETIME),
    },
    {
        "members": Multi(
            {"value": Attribute("pk", ID), "display": Attribute("username")}, groups_with_members
        )
    },
)


# Which resources: the filter


def filtered(rows, params, resource: Resource):
    """`rows` narrowed by the query's `filter` (none: all); a 400 invalidFilter naming what
    is wrong with one that cannot be read or names what the resource has not."""
    written = params.get("filter")
    if not written:
        return rows
    try:
        condition = where(parse(written), resource)
    except FilterError as error:
        raise invalid(f"{error} The filter: {written[:200]}", "invalidFilter") from None
    return rows.filter(condition)


def where(node: Node, resource: Resource) -> Q:
    """The condition a filter's tree sets on the resource's rows."""
    if isinstance(node, Junction):
        return reduce(and_ if node.op == "and" else or_, (where(n, resource) for n in node.nodes))
    if isinstance(node, Not):
        return ~where(node.node, resource)
    if isinstance(node, Within):
        return within(node, resource)
    multi, attribute = resolved(node.path, resource)
    if attribute is None:  # a multi-valued attribute itself: `members pr`
        if isinstance(node, Present):
            return multi.scope(ALL)
        raise FilterError(f"{node.path[:60]} has sub-attributes: compare one of them "
                          f"({node.path[:60]}.value ...) or filter its values "
                          f"({node.path[:60]}[...]).")  # fmt: skip
    if isinstance(node, Compare) and node.value is None:
        return absent(multi, attribute, node)
    condition = present(attribute) if isinstance(node, Present) else compared(attribute, node)
    return multi.scope(condition) if multi else condition


def within(node: Within, resource: Resource) -> Q:
    """`<path>[<filter>]`: one of the attribute's values meets the filter."""
    multi, attribute = resolved(node.path, resource)
    if multi is None or attribute is not None:
        raise FilterError(f"{node.path[:60]} is no multi-valued attribute: [...] filters the "
                          f"values of {', '.join(resource.multis) or 'none here'}.")  # fmt: skip
    return multi.scope(where(node.node, Resource("", multi.attributes, {})))


def absent(multi: Multi | None, attribute, node: Compare) -> Q:
    """`eq null`: the attribute has no value; `ne null`: it has one."""
    if node.op not in ("eq", "ne"):
        raise FilterError(f"{node.path[:60]} {node.op} null: null is compared by eq and ne "
                          f"alone.")  # fmt: skip
    has = multi.scope(present(attribute)) if multi else present(attribute)
    return ~has if node.op == "eq" else has


def resolved(path: str, resource: Resource):
    """What a path names: (None, the attribute) for a single-valued one, (the multi-valued
    attribute, its sub-attribute) for a sub-attribute's, (the multi-valued attribute, None)
    for itself. A FilterError for anything else."""
    key = unprefixed(path, resource.schema)
    if (attribute := named(resource.attributes, key)) is not None:
        return None, attribute
    head, _, sub = key.partition(".")
    multi = named(resource.multis, head)
    if multi is not None and not sub:
        return multi, None
    if multi is not None and (attribute := named(multi.attributes, sub)) is not None:
        return multi, attribute
    raise FilterError(f"{path[:60]!r} is no attribute a filter takes here: it takes "
                      f"{', '.join(paths(resource))}.")  # fmt: skip


def unprefixed(path: str, schema: str) -> str:
    """A path in lower case, the resource's schema URN before it dropped."""
    if schema and path.lower().startswith(schema.lower() + ":"):
        path = path[len(schema) + 1 :]
    return path.lower()


def named(table: dict, key: str):
    return next((value for name, value in table.items() if name.lower() == key), None)


def paths(resource: Resource) -> list[str]:
    subs = [f"{name}.{sub}" for name, multi in resource.multis.items() for sub in multi.attributes]
    return [*resource.attributes, *resource.multis, *subs]


def compared(attribute: Attribute | Constant, node: Compare) -> Q:
    """`<attribute> <op> <value>`: where the attribute has a value that compares so."""
    if isinstance(attribute, Constant):
        return ALL if holds(attribute.value, node) else NONE
    comparison = {STRING: string_compared, ID: id_compared, BOOLEAN: boolean_compared,
                  DATETIME: datetime_compared}[attribute.kind]  # fmt: skip
    return present(attribute) & comparison(attribute, node)


def wrong(node: Compare, what: str) -> FilterError:
    return FilterError(f"{node.path[:60]} {node.op} {str(node.value)[:40]}: {node.path[:60]} "
                       f"is {what}.")  # fmt: skip


def string_compared(attribute: Attribute, node: Compare) -> Q:
    if not isinstance(node.value, str):
        raise wrong(node, "a string, compared with a string in double quotes")
    lhs, value = attribute.expression(), node.value
    if node.op in ORDERS:
        if not attribute.case_exact:
            lhs, value = Lower(lhs), Lower(Value(value))
        return Q(ORDERS[node.op](lhs, value))
    condition = Q((EXACT if attribute.case_exact else IN_ANY_CASE)[node.op](lhs, value))
    return ~condition if node.op == "ne" else condition


def id_compared(attribute: Attribute, node: Compare) -> Q:
    if node.op not in ("eq", "ne"):
        raise wrong(node, "an id, compared by eq, ne or pr alone")
    if isinstance(node.value, bool) or not isinstance(node.value, str | int):
        raise wrong(node, "an id, compared with a string in double quotes")
    written = str(node.value).strip()
    found = re.fullmatch(r"[0-9]{1,18}", written)  # no row's id is longer
    condition = Q(Exact(attribute.expression(), int(written))) if found else NONE
    return ~condition if node.op == "ne" else condition


def boolean_compared(attribute: Attribute, node: Compare) -> Q:
    if node.op not in ("eq", "ne") or not isinstance(node.value, bool):
        raise wrong(node, "true or false, compared by eq, ne or pr alone with true or false")
    condition = Q(Exact(attribute.expression(), node.value))
    return ~condition if node.op == "ne" else condition


def datetime_compared(attribute: Attribute, node: Compare) -> Q:
    """A date and time compared to the second, as an answer writes it."""
    if node.op in ("co", "sw", "ew"):
        raise wrong(node, "a date and time, compared by eq, ne, gt, ge, lt, le or pr")
    at = moment(node)
    lhs = TruncSecond(attribute.expression(), tzinfo=UTC)
    if node.op in ORDERS:
        return Q(ORDERS[node.op](lhs, at))
    condition = Q(Exact(lhs, at))
    return ~condition if node.op == "ne" else condition


def moment(node: Compare):
    """The filter's date and time (RFC 3339, UTC where it names no offset)."""
    try:
        at = parse_datetime(node.value) if isinstance(node.value, str) else None
        if at is not None:
            at = (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        at = None
    if at is None:
        raise wrong(node, 'a date and time, compared with one such as "2025-01-31T09:00:00Z"')
    return at


def holds(constant: str | bool, node: Compare) -> bool:
    """Whether a constant sub-attribute compares so (a string in any case)."""
    if isinstance(constant, bool):
        if node.op not in ("eq", "ne") or not isinstance(node.value, bool):
            raise wrong(node, "true or false, compared by eq, ne or pr alone with true or false")
        return (constant == node.value) == (node.op == "eq")
    if not isinstance(node.value, str):
        raise wrong(node, "a string, compared with a string in double quotes")
    have, given = constant.lower(), node.value.lower()
    return {"eq": have == given, "ne": have != given, "co": given in have,
            "sw": have.startswith(given), "ew": have.endswith(given), "gt": have > given,
            "ge": have >= given, "lt": have < given, "le": have <= given}[node.op]  # fmt: skip


# In which order: sortBy, sortOrder


def ordered(rows, params, resource: Resource):
    """`rows` in the order `sortBy` and `sortOrder` ask for (RFC 7644 §3.4.2.3; none: by
    id), a resource without the value last (first, descending), ties by id."""
    written = params.get("sortBy")
    if not written:
        return rows
    order = (params.get("sortOrder") or "ascending").strip().lower()
    if order not in ("ascending", "descending"):
        raise invalid(f"sortOrder is ascending or descending, not {order[:40]!r}.")
    key = sort_key(written, resource)
    key = key.desc(nulls_first=True) if order == "descending" else key.asc(nulls_last=True)
    return rows.order_by(key, "pk")


def sort_key(written: str, resource: Resource):
    """The expression lists sort by for the attribute `sortBy` names: strings in any case
    but those compared as written, an empty string as no value."""
    try:
        multi, attribute = resolved(written, resource)
    except FilterError:
        multi, attribute = None, None
    if multi is not None and attribute in (None, multi.sort):
        attribute = multi.sort
    elif multi is not None:
        attribute = None
    if not isinstance(attribute, Attribute):
        sortable = [name for name, kept in resource.attributes.items()
                    if isinstance(kept, Attribute)]  # fmt: skip
        sortable += [name for name, multi in resource.multis.items() if multi.sort]
        raise invalid(f"sortBy {written[:60]!r} is no attribute lists sort by here: they sort by "
                      f"{', '.join(sortable)}.")  # fmt: skip
    key = attribute.expression()
    if attribute.kind == STRING:
        key = NullIf(key, Value(""))
        key = key if attribute.case_exact else Lower(key)
    return key


def selected(rows, params, resource: Resource):
    """The rows a list answers, filtered and sorted as the query asks."""
    return ordered(filtered(rows, params, resource), params, resource)


# Which attributes: attributes, excludedAttributes


@dataclass(frozen=True)
class Projection:
    """The attributes a read answers with (RFC 7644 §3.9): those `asked` (none: all those
    returned by default) but those `left_out`, `id` and `schemas` always. Each a path in
    lower case, its schema's URN dropped: an attribute (`name`) or a sub-attribute
    (`name.givenname`, `emails.value`)."""

    asked: frozenset[str] = frozenset()
    left_out: frozenset[str] = frozenset()

    def shows(self, name: str) -> bool:
        """Whether the answer holds the attribute `name`, or some of its sub-attributes."""
        key = name.lower()
        wanted = not self.asked or any(p == key or p.startswith(key + ".") for p in self.asked)
        return wanted and key not in self.left_out

    def apply(self, resource: dict) -> dict:
        """The resource with the attributes shown alone."""
        return {name: value if name.lower() in ALWAYS else self.narrowed(name.lower(), value)
                for name, value in resource.items()
                if name.lower() in ALWAYS or self.shows(name)}  # fmt: skip

    def narrowed(self, key: str, value):
        """An attribute's value with the sub-attributes shown alone."""
        whole = not self.asked or key in self.asked
        kept = None if whole else subs(self.asked, key)
        return without(value, kept, subs(self.left_out, key))


def subs(written: frozenset[str], key: str) -> set[str]:
    return {path.partition(".")[2] for path in written if path.startswith(key + ".")}


def without(value, kept: set[str] | None, dropped: set[str]):
    """A complex value (or a list of them) with its sub-attributes `kept` alone (None: all)
    but those `dropped`."""
    if isinstance(value, list):
        return [without(item, kept, dropped) for item in value]
    if isinstance(value, dict):
        return {name: item for name, item in value.items()
                if (kept is None or name.lower() in kept)
                and name.lower() not in dropped}  # fmt: skip
    return value


def projection(params, schema: str) -> Projection:
    """What `attributes` and `excludedAttributes` ask of a resource of `schema`."""
    return Projection(listed(params.get("attributes"), schema),
                      listed(params.get("excludedAttributes"), schema))  # fmt: skip


def listed(written: str | None, schema: str) -> frozenset[str]:
    names = (name.strip() for name in (written or "").split(","))
    return frozenset(unprefixed(name, schema) for name in names if name)
