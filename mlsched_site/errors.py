"""The API's refusals in one shape, whichever view made them."""

from rest_framework.exceptions import ValidationError
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """DRF's answer to an exception, a 400's messages always listed per name (`{"reason":
    ["At most 200 characters of text."]}`), as a serializer gives them: a view that names a
    field or a query parameter at fault with one message gives it the same shape, so a client
    reads every 400 one way."""
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
