"""Request checks every view would otherwise repeat."""

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.http import JsonResponse
from django.utils.decorators import sync_and_async_middleware
from django.utils.http import http_date

from mlsched_site.health import healthz


def refuse_nul_in_query(get_response):
    """A NUL in a query parameter is a 400 naming the parameter (the API's error shape), for
    every page and API: a database text field cannot hold one, so a filter on it would
    otherwise fail as a 500."""

    def middleware(request):
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                shown = name.replace("\x00", "\\0")
                return JsonResponse({shown: ["Cannot contain a NUL character."]}, status=400)
        return get_response(request)

    return middleware


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


@sync_and_async_middleware
def date_header(get_response):
    """Every answer says when it was made (HTTP's Date header, which daphne does not add): the
    CLI counts how long jobs have waited or run from the server's clock, not from its own
    machine's, which may be off."""

    if iscoroutinefunction(get_response):

        async def middleware(request):
            response = await get_response(request)
            response.headers.setdefault("Date", http_date())
            return response

    else:

        def middleware(request):
            response = get_response(request)
            response.headers.setdefault("Date", http_date())
            return response

    return middleware
