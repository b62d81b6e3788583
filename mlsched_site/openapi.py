"""GET /api/v1/openapi.yaml and /api/v1/openapi.json: the users' REST API described in OpenAPI 3.1
(docs/openapi.yaml), for client generators and API browsers.

A public description of a public surface, as an API's reference pages are: served without
authentication, and without the API's rate limits (it is read once per process, from the file,
and costs no query). tests/test_openapi.py keeps the document true to the URLconf and to the
answers the views give."""

import json
from functools import cache

import yaml
from django.conf import settings
from django.http import HttpResponse
from django.views import View

DOCUMENT = "docs/openapi.yaml"


@cache
def written() -> str:
    """The document as written."""
    return (settings.BASE_DIR / DOCUMENT).read_text(encoding="utf-8")


@cache
def as_json() -> str:
    return json.dumps(yaml.safe_load(written()))


class OpenApiYaml(View):
    def get(self, request):
        return HttpResponse(written(), content_type="application/yaml")


class OpenApiJson(View):
    def get(self, request):
        return HttpResponse(as_json(), content_type="application/json")
