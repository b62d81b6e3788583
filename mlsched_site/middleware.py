"""Request checks every view would otherwise repeat."""

from urllib.parse import urlsplit

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.conf import settings
from django.http import Http404, JsonResponse
from django.utils.decorators import sync_and_async_middleware
from django.utils.http import http_date

from jobs import cli_archive
from jobs.cli.client import RELEASE_HEADER
from mlsched_site.health import healthz
from quotas.scim import invalid
from quotas.scim_views import refusal


def refuse_nul(get_response):
    """A NUL in a query parameter, or in a field of a form posted (a page's, the admin's), is a
    400 naming it (the API's error shape; under /scim/, SCIM's, RFC 7644's error), for every
    page and API: a database text field cannot hold one, so a filter on it or a row written
    with it would otherwise fail as a 500 (no browser sends one: a script's mistake). A NUL in
    the path (`%00`) is a 404: nothing is named so, and a look-up by a name holding one would
    fail the same way."""

    def middleware(request):
        if "\x00" in request.path:
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": "Not found."}, status=404)
            raise Http404("Nothing is named so.")
        read = [request.GET, request.POST] if request.content_type in FORMS else [request.GET]
        for given in read:
            for name, values in given.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    shown = name.replace("\x00", "\\0")
                    if request.path.startswith("/scim/") and settings.MLSCHED_SCIM_TOKEN:
                        return scim_refusal(shown)
                    return JsonResponse({shown: ["Cannot contain a NUL character."]}, status=400)
        return get_response(request)

    return middleware


# The bodies a browser posts a form in, which Django reads into request.POST.
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def scim_refusal(name: str):
    scim_type = "invalidFilter" if name == "filter" else "invalidValue"
    return refusal(invalid(f"{name}: cannot contain a NUL character.", scim_type))


@sync_and_async_middleware
def health_before_host_check(get_response):
    """/healthz answers whatever the Host header: load balancers and Kubernetes probes send
    the replica's IP address, which ALLOWED_HOSTS rightly does not list, and a 400 there would
    take every replica out of rotation. Nothing else is served without the host check."""

    def is_probe(request) -> bool:
        return request.path == "/healthz" and request.method in ("GET", "HEAD")

    if iscoroutinefunction(get_response):

        async def middleware(request):
            if is_probe(request):
                return await healthz(request)
            return await get_response(request)

    else:

        def middleware(request):
            if is_probe(request):
                return async_to_sync(healthz)(request)
            return get_response(request)

    return middleware


def answering(get_response, change):
    """The middleware calling `change(request, response)` on every answer of the chain, sync
    or async as the chain is."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            return change(request, await get_response(request))

    else:

        def middleware(request):
            return change(request, get_response(request))

    return middleware


@sync_and_async_middleware
def date_header(get_response):
    """Every answer says when it was made (HTTP's Date header, which daphne does not add): the
    CLI counts how long jobs have waited or run from the server's clock, not from its own
    machine's, which may be off."""

    def dated(request, response):
        response.headers.setdefault("Date", http_date())
        return response

    return answering(get_response, dated)


@sync_and_async_middleware
def release_header(get_response):
    """Every answer under /api/v1/ names the release of the CLI this server gives
    (`Mlsched-Cli-Release`, jobs.cli_archive.release): a downloaded CLI of another release
    tells its user how to get this one, without a request of its own. Read once, when the
    middleware is loaded."""
    current = cli_archive.release()

    def named(request, response):
        if request.path_info.startswith("/api/v1/"):
            response.headers[RELEASE_HEADER] = current
        return response

    return answering(get_response, named)


# What the portal's and the admin's pages may load and talk to: scripts, styles, images and
# fonts of the app alone, its API and websocket alone, no plugin, no frame of them elsewhere,
# forms posted to it alone. A job's name, labels or log shown in a page cannot run a script
# there even if its escaping failed (no script written in a page runs: confirm.js asks before a
# button's post; the admin's pages that wrote one are drawn by templates/admin's overrides).
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
    "connect-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'",
    "frame-ancestors 'none'",
])  # fmt: skip


def origin(url: str) -> str:
    """The origin of a URL, as a Content-Security-Policy names it: scheme, host and port."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def policy() -> str:
    """CONTENT_SECURITY_POLICY; where OpenID Connect sign-on is on, forms may go on to the
    identity provider's origin too: logging out (a form's post) ends its session there."""
    if not settings.MLSCHED_OIDC_ISSUER:
        return CONTENT_SECURITY_POLICY
    provider = origin(settings.MLSCHED_OIDC_ISSUER)
    return CONTENT_SECURITY_POLICY.replace("form-action 'self'", f"form-action 'self' {provider}")


def with_policy(request, response):
    """The response, a page of the portal or the admin given the Content-Security-Policy."""
    if response.get("Content-Type", "").startswith("text/html"):
        response.headers.setdefault("Content-Security-Policy", policy())
    return response


@sync_and_async_middleware
def content_security_policy(get_response):
    """Every page of the portal and the admin says what it may load
    (`CONTENT_SECURITY_POLICY`)."""
    return answering(get_response, with_policy)
