"""The teams as the file `apply_teams` takes (quotas.declared), written from the database:
`manage.py export_teams`, `GET /api/v1/tenants/export/` and CLI `export-teams`, as `kubectl
get -o yaml` gives what `kubectl apply` takes. So a platform set up in the admin moves under
version control: every tenant with every field a file may give, its quotas, its default
priority class and its members given by hand (those from sign-on groups are the groups'),
then every priority class with the tenants it is open to. Applying the export changes
nothing; each value is written as the file's reader takes it back (lists as lists, a spend
alert as text, so its cents stay exact).
"""

from decimal import Decimal

import yaml

from quotas.declared import CLASS_FIELDS, FIELDS, LISTS, QUOTA_DEFAULTS
from quotas.models import PriorityClass, Tenant

HEADER = (
    "# The teams as mlsched has them: `manage.py apply_teams FILE` or CLI `apply-teams FILE`\n"
    "# makes them so again.\n"
)


def document(slugs: list[str] | None = None) -> dict:
    """The teams file of the tenants of `slugs` (None: every tenant) and every priority class,
    as data: a query for the tenants, one for their quotas, one for their members, one for the
    classes and one for the tenants they are open to."""
    tenants = Tenant.objects.order_by("slug").select_related("default_priority_class")
    if slugs is not None:
        tenants = tenants.filter(slug__in=slugs)
    tenants = tenants.prefetch_related("quotas", "memberships__user")
    classes = PriorityClass.objects.order_by("-value").prefetch_related("tenants")
    return {"tenants": [tenant_entry(t) for t in tenants],
            "priority_classes": [class_entry(c) for c in classes]}  # fmt: skip


def unknown(slugs: list[str] | None) -> str | None:
    """The first of `slugs` no tenant has (None: all are tenants', or none asked): one query."""
    known = set(Tenant.objects.filter(slug__in=slugs or ()).values_list("slug", flat=True))
    return next((slug for slug in slugs or () if slug not in known), None)


def written(teams: dict) -> str:
    """A teams file (`document`'s) as YAML, under a line saying what it is."""
    return HEADER + yaml.safe_dump(teams, sort_keys=False, allow_unicode=True, width=100)


def tenant_entry(tenant: Tenant) -> dict:
    entry: dict = {"slug": tenant.slug}
    for name in FIELDS:
        entry[name] = value_of(name, getattr(tenant, name))
    default = tenant.default_priority_class
    entry["default_priority_class"] = default.name if default else None
    entry["quotas"] = {
        q.flavor: {amount: getattr(q, amount) for amount in QUOTA_DEFAULTS}
        for q in sorted(tenant.quotas.all(), key=lambda q: q.flavor)
    }
    entry["members"] = {
        m.user.get_username(): m.role
        for m in sorted(tenant.memberships.all(), key=lambda m: m.user.get_username())
        if not m.from_group
    }
    return entry


def class_entry(row: PriorityClass) -> dict:
    entry: dict = {"name": row.name}
    for name in CLASS_FIELDS:
        entry[name] = getattr(row, name)
    entry["tenants"] = sorted(t.slug for t in row.tenants.all())
    return entry


def value_of(name: str, value: object) -> object:
    """A tenant's field as a file gives it: a text kept one a line as its list, an amount of
    money as its text ("1000.00")."""
    if name in LISTS:
        return LISTS[name](str(value))
    if isinstance(value, Decimal):
        return f"{value:f}"
    return value
