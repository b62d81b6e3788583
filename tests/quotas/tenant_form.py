"""The tenant change page's own fields, as the admin tests send them."""


def tenant_fields(tenant, **changes) -> dict:
    """The tenant's own fields as its change page sends them untouched (weight 1, cohort
    default, notifications as JSON, nodes taken whole allowed), ``changes`` over them; no rows
    of its formsets."""
    return {
        "name": tenant.name, "slug": tenant.slug, "fair_share_weight": "1", "cohort": "default",
        "notify_format": "json", "exclusive_allowed": "on", **changes,
    }  # fmt: skip
