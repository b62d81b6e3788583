"""ASGI entry point: the portal, the APIs and the admin over HTTP; live job pages over
websockets (session-authenticated, same-origin only)."""

import os
from urllib.parse import urlsplit

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlsched_site.settings")
http = get_asgi_application()  # sets Django up before the consumers are imported

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import (  # noqa: E402
    AllowedHostsOriginValidator,
    WebsocketDenier,
)
from django.http.request import is_same_domain  # noqa: E402
from django.middleware.csrf import CsrfViewMiddleware  # noqa: E402

from jobs.routing import websocket_urlpatterns  # noqa: E402


def same_origin(application):
    """Let a socket through only from a page of the host it was opened on, or of one of
    CSRF_TRUSTED_ORIGINS: what Django asks of a form's POST. ALLOWED_HOSTS alone would let in
    a page of a sibling subdomain (".example.com", "*"), and such a page's socket carries the
    session cookie: the same site, so SameSite=Lax does not hold it back."""

    async def check(scope, receive, send):
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin1").lower()
        origin = headers.get(b"origin", b"").decode("latin1").lower()
        # A browser always names the host; a client without one has only ALLOWED_HOSTS to pass.
        if host and urlsplit(origin).netloc != host and not csrf_trusted(origin):
            return await WebsocketDenier()(scope, receive, send)
        return await application(scope, receive, send)

    return check


def csrf_trusted(origin: str) -> bool:
    csrf = CsrfViewMiddleware(lambda request: None)
    parts = urlsplit(origin)
    subdomains = csrf.allowed_origin_subdomains.get(parts.scheme, ())
    return origin in csrf.allowed_origins_exact or any(
        is_same_domain(parts.netloc, pattern) for pattern in subdomains
    )


application = ProtocolTypeRouter(
    {
        "http": http,
        "websocket": AllowedHostsOriginValidator(
            same_origin(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
