"""The API's refusals in one shape, whichever view made them."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """DRF's answer to an exception, a 400's messages always listed per name (`{"reason":
    ["At most 200 characters of text."]}`), as a serializer gives them: a view that names a
    field or a query parameter at fault with one message gives it the same shape, so a client
    reads every 400 one way. A body past DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 saying so, as
    JSON (Django's own answer to it is an HTML 400)."""
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
