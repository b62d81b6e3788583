"""The API's refusals in one shape, whichever view made them; and the answer to a request that
lost the database partway."""

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.deprecation import MiddlewareMixin
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)

# What a request gets when the database did not answer it partway: its connection lost (a
# restart, a failover), a deadlock or a serialization failure. What it wrote is rolled back
# with its transaction, so it may be sent again: a 503 saying so, not a 500.
UNAVAILABLE = (OperationalError, InterfaceError)
UNAVAILABLE_BODY = {"detail": "The database did not answer: try again in a few seconds."}
RETRY = {"Retry-After": "5"}


def logged(request, lost: Exception) -> None:
    """Log a request the database did not answer, with why: its answer says only to retry."""
    logger.error("database unavailable: %s", request.path, exc_info=lost)


def exception_handler(exc, context):
    """DRF's answer to an exception, a 400's messages always listed per name (`{"reason":
    ["At most 200 characters of text."]}`), as a serializer gives them: a view that names a
    field or a query parameter at fault with one message gives it the same shape, so a client
    reads every 400 one way. A body past DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 saying so, as
    JSON (Django's own answer to it is an HTML 400)."""
    if isinstance(exc, UNAVAILABLE):
        return unavailable(context["request"], exc)
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response({"detail": f"The request body is over {limit} bytes."}, status=413)
    response = drf_exception_handler(exc, context)
    if (
        response is not None
        and isinstance(exc, ValidationError)
        and isinstance(response.data, dict)
    ):
        response.data = {
            name: said if isinstance(said, list | dict) else [said]
            for name, said in response.data.items()
        }
    return response


def unavailable(request, lost: Exception) -> HttpResponse:
    """The answer to a request that lost the database, logged: JSON under /api/, else a page of
    its own (drawn without the request: its context processors would ask the database again,
    and without a user or a menu)."""
    logged(request, lost)
    if request.path.startswith("/api/"):
        return JsonResponse(UNAVAILABLE_BODY, status=503, headers=RETRY)
    return HttpResponse(render_to_string("503.html"), status=503, headers=RETRY)


class DatabaseUnavailable(MiddlewareMixin):
    """A view that lost the database partway answers 503 (`unavailable`), as the API's views
    do through DRF's handler above; a middleware that reads the database before the view
    (a sign-in by the proxy, an OpenID Connect session's check) answers so itself."""

    def process_exception(self, request, exception):
        return unavailable(request, exception) if isinstance(exception, UNAVAILABLE) else None
