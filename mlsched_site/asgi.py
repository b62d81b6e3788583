"""ASGI entry point: the portal, the REST API and the admin over HTTP."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlsched_site.settings")

application = get_asgi_application()
