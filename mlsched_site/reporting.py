"""What Django's error pages (DEBUG=1) and error mails show of the settings: Django hides names
holding API, AUTH, TOKEN, KEY, SECRET, PASS or SIGNATURE; the service addresses carry their
passwords in a URL (REDIS_URL, the Celery broker, the channel layer's and the caches' locations)
under names it would show."""

import re

from django.views.debug import SafeExceptionReporterFilter


class SettingsFilter(SafeExceptionReporterFilter):
    hidden_settings = re.compile(
        "API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL|BROKER|CHANNEL_LAYERS|CACHES|"
        "DATABASES",
        flags=re.IGNORECASE,
    )
