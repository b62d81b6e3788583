"""Every call of the users' API answers input it cannot take with a 4xx, never a 500: each
documented call, as a team's owner and as a platform admin, is sent bodies that are not
objects, each field of its body as every kind of wrong value, each query parameter as text
it cannot read, and path segments no object has."""

import json
import re

import pytest
import yaml
from rest_framework.test import APIClient

from jobs import cycle
from quotas import tenant_secrets
from tests.test_openapi import DOCUMENT, at, resolved, root, running, world  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

# Values of every JSON kind a field may be wrong with: each type, the ends of numbers, text
# PostgreSQL cannot store (a NUL, a lone surrogate), a deep object.
WRONG = [None, True, -1, 2**63, 1e308, 0.5, "", "x", "\x00", "\ud800", "9" * 40,
         "2026-13-45T25:61:00Z", [], [None], [{"id": "x"}], {}, {"a": {"b": [1]}},
         "x" * 70_000]  # fmt: skip
# Bodies that are not an object of fields.
NOT_OBJECTS = [[], [1], "x", 1, None, True]
# Text a query parameter cannot be read as.
QUERIES = ["", "x", "\x00", "-1", "0", "9" * 40, "1.5", "2026-13-45", "now+99999999999d",
           "a,b,,", "%ff", "true,false", "x" * 5000]  # fmt: skip
# Path segments (text ones: a number's converter takes none) naming nothing.
SEGMENTS = ["nobody", "x" * 300, "%00", "a%2Fb", "..", "ü"]


def properties(operation: dict) -> list[str]:
    """The names of the fields of an operation's JSON body, through $refs and combinations."""
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if not body:
        return []
    found: list[str] = []
    pending = [body["schema"]]
    while pending:
        schema = resolved(pending.pop())
        found += [name for name in schema.get("properties", {}) if name not in found]
        for key in ("allOf", "oneOf", "anyOf"):
            pending += schema.get(key, [])
    return found


def query_names(operation: dict, path_item: dict) -> list[str]:
    names = []
    for parameter in [*path_item.get("parameters", []), *operation.get("parameters", [])]:
        parameter = at(parameter["$ref"])[1] if "$ref" in parameter else parameter
        if parameter.get("in") == "query":
            names.append(parameter["name"])
    return names


def operations():
    for path, item in DOCUMENT["paths"].items():
        for method in ("get", "post", "put", "patch", "delete"):
            if method in item:
                yield path, method, item[method], item


def client(user) -> APIClient:
    api = APIClient()
    api.raise_request_exception = False  # a 500 is an answer to count, not an error raised
    api.force_authenticate(user)
    return api


def urls(path: str, ids: dict) -> list[str]:
    """The path with its parameters named as existing objects, and with each text parameter
    naming nothing."""
    filled = path
    for name, value in ids.items():
        filled = filled.replace("{" + name + "}", str(value))
    out = [filled]
    for name in re.findall(r"{(\w+)}", path):
        if name != "id":
            for wrong in SEGMENTS:
                out.append(path.replace("{" + name + "}", wrong).format(**ids))
    return out


@pytest.fixture
def platform(world, alice, root, settings):  # noqa: F811
    settings.MLSCHED_API_RATE = "1000000/minute"
    job = running(alice)
    cycle.run_cycle()
    tenant_secrets.put(alice.memberships.get().tenant, "HF_TOKEN", "hf_value_1234")
    return {"id": job, "slug": "alpha", "username": "bob", "name": "HF_TOKEN",
            "cluster": "east", "node": "gpu-a"}  # fmt: skip


def tries(path: str, method: str, operation: dict, item: dict, ids: dict):
    """What each call is sent: (url, JSON body or None)."""
    for url in urls(path, ids):
        if method != "get":
            yield from ((url, body) for body in NOT_OBJECTS)
        yield from ((url, {name: value}) for name in properties(operation) for value in WRONG)
        for name in query_names(operation, item):
            yield from ((f"{url}?{name}={value}", None) for value in QUERIES)
        yield url, None


def last_if_it_ends(call) -> bool:
    """Whether a call ends what the others change (a job's cancel or requeue, a deletion, a
    drain): those go last, so that the others' input reaches their checks."""
    path, method, *_ = call
    return method == "delete" or path.endswith(("/cancel/", "/requeue/", "/drain/"))


def test_no_call_answers_wrong_input_with_a_500(platform, alice, root, settings):  # noqa: F811
    settings.MLSCHED_SUBMIT_RATE = settings.MLSCHED_TENANT_SUBMIT_RATE = "1000000/minute"
    failures, refused = [], set()
    for user in (alice, root):
        api = client(user)
        for path, method, operation, item in sorted(operations(), key=last_if_it_ends):
            for url, body in tries(path, method, operation, item, platform):
                # JSON as a client writes it: a lone surrogate escaped, as json.dumps does.
                sent = "" if body is None else json.dumps(body)
                answer = api.generic(method.upper(), url, sent, "application/json")
                if answer.status_code >= 500:
                    failures.append((user.username, method, url[:120], repr(body)[:80]))
                refused |= {(method, path)} if answer.status_code == 400 else set()

    assert not failures, yaml.safe_dump(failures[:40], width=200)
    # The wrong input reached what reads it: every call taking fields or parameters refused
    # some of it (to the team's owner or to the platform admin).
    taking = {(method, path) for path, method, operation, item in operations()
              if properties(operation) or query_names(operation, item)}  # fmt: skip
    assert taking - refused == set()


def test_a_nul_in_a_pages_path_is_a_404(client, alice):
    client.force_login(alice)

    page = client.post("/secrets/alpha/%00/delete/")
    api = client.get("/api/v1/tenants/alpha/members/%00/")

    assert page.status_code == 404
    assert (api.status_code, api.json()) == (404, {"detail": "Not found."})
