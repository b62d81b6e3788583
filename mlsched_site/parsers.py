"""Request parsing shared by the users' API and the agents' API."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    """DRF's, with JSON nested too deep for Python's parser a 400 like any other malformed body:
    the json module raises RecursionError there, which DRF does not catch (a 500)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deep.") from None
