"""Rate limits on the users' API, per user, counted in the shared "throttle" cache.

One user (or script) hammering the API cannot starve the others: past the rate, requests get
429 with Retry-After. Submissions have a second, lower limit of their own. Cluster agents are
not limited: their heartbeat is the control loop. With the cache (Redis) down, the limits
fail open: a request is never refused for want of its counter.
"""

import re
from types import SimpleNamespace

from django.conf import settings
from django.core.cache import caches
from rest_framework.throttling import UserRateThrottle

from jobs import access
from jobs.events import best_effort

SLUG = re.compile(r"[-a-zA-Z0-9_]{1,50}")


class UserRate(UserRateThrottle):
    """Every API request of a user: ``MLSCHED_API_RATE``."""

    scope = "user"
    setting = "MLSCHED_API_RATE"

    @property
    def cache(self):
        return caches["throttle"]

    def get_rate(self) -> str:
        # Read per request, so that a changed setting applies without a restart.
        return getattr(settings, self.setting)

    def allow_request(self, request, view) -> bool:
        with best_effort("the API rate limit"):
            return super().allow_request(request, view)
        return True  # the counters are out of reach: let the request through


class SubmitRate(UserRate):
    """Job submissions of a user: ``MLSCHED_SUBMIT_RATE``."""

    scope = "submit"
    setting = "MLSCHED_SUBMIT_RATE"


class TenantSubmitRate(UserRate):
    """Job submissions to one tenant, all its members and their tokens together:
    ``MLSCHED_TENANT_SUBMIT_RATE``. Only submissions by someone who may submit there count: an
    outsider naming the tenant gets a 400 and uses up none of its budget."""

    scope = "tenant-submit"
    setting = "MLSCHED_TENANT_SUBMIT_RATE"

    def get_cache_key(self, request, view) -> str | None:
        slug = request.data.get("tenant") if isinstance(request.data, dict) else None
        if not (isinstance(slug, str) and SLUG.fullmatch(slug) and request.user.is_authenticated):
            return None  # the serializer answers a malformed tenant with a 400
        if not access.submit_tenants(request.user).filter(slug=slug).exists():
            return None
        return self.cache_format % {"scope": self.scope, "ident": slug}


def portal_submit_wait(request, tenant_slug: str) -> float | None:
    """The portal's submit form counts against the same submission limits as the API: None if
    this submission may go, else the seconds to wait."""
    # The throttles read the user, the submitted tenant and the client's address.
    api_like = SimpleNamespace(user=request.user, data={"tenant": tenant_slug}, META=request.META)
    for throttle in (SubmitRate(), TenantSubmitRate()):
        if not throttle.allow_request(api_like, None):
            return throttle.wait() or 1
    return None
