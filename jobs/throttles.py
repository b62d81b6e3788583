"""Rate limits on the users' API, per user, counted in the shared "throttle" cache.

One user (or script) hammering the API cannot starve the others: past the rate, requests get
429 with Retry-After. Submissions have a second, lower limit of their own. Cluster agents are
not limited: their heartbeat is the control loop. With the cache (Redis) down, the limits
fail open: a request is never refused for want of its counter.
"""

from django.conf import settings
from django.core.cache import caches
from rest_framework.throttling import UserRateThrottle

from jobs.events import best_effort


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
