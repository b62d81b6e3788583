"""Rate limits on the users' API, per user, counted in the shared "throttle" cache.

One user (or script) hammering the API cannot starve the others: past the rate, requests get
429 with Retry-After. Submissions have a second, lower limit of their own. Cluster agents are
not limited: their heartbeat is the control loop.
"""

from django.conf import settings
from django.core.cache import caches
from rest_framework.throttling import UserRateThrottle


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


class SubmitRate(UserRate):
    """Job submissions of a user: ``MLSCHED_SUBMIT_RATE``."""

    scope = "submit"
    setting = "MLSCHED_SUBMIT_RATE"
