"""docs/openapi.yaml, the users' REST API described in OpenAPI 3.1, stays true: a valid document
naming every path and method the URLconf serves under /api/v1/ (the agents' aside) and no
other, its enums the code's, its request bodies the serializers' fields with their bounds, and
the answers the views give, on real data, matching the schemas it gives for them.

An answer is checked against a strict reading of its schema: every object refuses a property
no part of its schema names (unevaluatedProperties), so a field a view gains must be documented
too. The document itself stays open to fields added later, as clients should be."""

import copy
import re
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
import yaml
from django.urls import get_resolver, resolve
from django.urls.resolvers import URLResolver
from guardian.shortcuts import assign_perm
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from rest_framework import serializers
from rest_framework.test import APIClient

from clusters.models import Cluster
from jobs import actions, cycle, nodes_api, reasons
from jobs.action_serializers import (
    CancelJobsSerializer,
    ConstraintsSerializer,
    DependenciesSerializer,
    MinWorkersSerializer,
    NotificationsSerializer,
    PrioritySerializer,
    RelabelSerializer,
    RequestSerializer,
    RequeueSerializer,
    ResubmitSerializer,
    RetriesSerializer,
    RuntimeLimitSerializer,
    ShardLimitSerializer,
)
from jobs.maintenance_api import BookingAsked, WindowAsked
from jobs.models import Attempt, Dependency, Family, Job, LogChunk
from jobs.serializers import SubmitSerializer
from jobs.states import State
from quotas import cli_logins, tenant_secrets, tokens
from quotas.models import CliLogin, Membership, Rate, SignIn
from tests.factories import (
    NodeFactory,
    PriorityClassFactory,
    QuotaFactory,
    TenantVolumeFactory,
    UserFactory,
)

ROOT = Path(__file__).resolve().parent.parent
WRITTEN = (ROOT / "docs" / "openapi.yaml").read_text()
DOCUMENT = yaml.safe_load(WRITTEN)
SCHEMAS = DOCUMENT["components"]["schemas"]
URI = "urn:mlsched:openapi"  # the document's, for the $refs into it

SPEC = {
    "tenant": "alpha", "name": "resnet", "family": "training", "image": "pytorch:2",
    "command": ["python", "train.py"], "env": {"LR": "0.1"}, "cpu_milli": 8000,
    "memory_mb": 32_000, "gpus": 4, "workers": 2, "max_runtime_s": 3600,
    "labels": {"project": "llm"},
}  # fmt: skip
BATCH = {**SPEC, "name": "embed", "family": "batch_inference", "workers": 1, "gpus": 0,
         "shards": 3}  # fmt: skip


# The document against the URLconf.


def routes(patterns, prefix=""):
    """(route, view) for every URL pattern, as tests/test_readme.py walks them."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern.callback


def shape(path: str) -> str:
    """A path with its parameters blanked, however written: `jobs/<int:pk>/`, `jobs/{id}/`."""
    return "/" + re.sub(r"<[^>]+>|\{[^}]+\}", "{}", path).lstrip("/")


def methods(view) -> set[str]:
    """The methods a view answers with a handler of its own: OPTIONS and HEAD, which Django and
    DRF answer for every view alike, aside."""
    handlers = view.view_class  # every view under /api/v1/ is a class
    return {m for m in handlers.http_method_names if hasattr(handlers, m)} - {"options", "head"}


def served() -> set[tuple[str, str]]:
    api = [(route, view) for route, view in routes(get_resolver().url_patterns)
           if route.startswith("api/v1/") and not route.startswith("api/v1/agent/")]  # fmt: skip
    return {(shape(route), method) for route, view in api for method in methods(view)}


def documented() -> set[tuple[str, str]]:
    verbs = {"get", "put", "post", "delete", "patch"}
    return {(shape(path), method) for path, item in DOCUMENT["paths"].items()
            for method in item.keys() & verbs}  # fmt: skip


def test_it_is_a_valid_openapi_3_1_document():
    validate(DOCUMENT, cls=OpenAPIV31SpecValidator)

    assert DOCUMENT["openapi"] == "3.1.0"


def test_it_names_every_path_and_method_the_api_serves_and_no_other():
    serves, says = served(), documented()

    assert len(serves) > 50
    assert sorted(serves - says) == [] and sorted(says - serves) == []


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        ("State", State.values),
        ("Family", Family.values),
        ("Hold", ["", *Job.Hold.values]),
        ("WaitCode", reasons.CODES),
        # The codes the job lists filter by, none yet, and the cycle's own for a placement that
        # lost its room before it committed.
        ("PendingReason", {*reasons.CODES, ""}),
        ("DependencyKind", Dependency.Kind.values),
        ("AttemptOutcome", ["", *Attempt.Outcome.values]),
        ("StopCause", ["", *Attempt.StopCause.values]),
        ("NodeState", nodes_api.STATES),
        ("ClusterHealth", Cluster.Health.values),
        ("Role", Membership.Role.values),
        ("SecretKindOrNone", tenant_secrets.KINDS),
    ],
)
def test_its_enums_are_the_codes(schema, values):
    assert sorted(SCHEMAS[schema]["enum"]) == sorted(values)


# A request body against the serializer that reads it.


def resolved(schema: dict) -> dict:
    """A schema with the component its $ref names and its allOf members merged in: its own
    keywords over theirs, their properties and required names together."""
    parts = [SCHEMAS[schema["$ref"].rsplit("/", 1)[1]]] if "$ref" in schema else []
    parts += schema.get("allOf", [])
    own = {key: value for key, value in schema.items() if key not in ("$ref", "allOf")}
    merged: dict = {}
    properties: dict = {}
    required: list = []
    for part in [*map(resolved, parts), own]:
        merged.update(part)
        properties.update(part.get("properties", {}))
        required += part.get("required", [])
    return {**merged, "properties": properties, "required": required}


def kinds(schema: dict) -> set[str]:
    """The JSON types a schema allows, its oneOf's and anyOf's included."""
    said = schema.get("type", [])
    found = set([said] if isinstance(said, str) else said)
    for member in schema.get("oneOf", []) + schema.get("anyOf", []):
        found |= kinds(resolved(member))
    return found


def implied(field: serializers.Field) -> dict:
    """The JSON Schema keywords a DRF field's own bounds imply."""
    said: dict = {}
    bounds = {"min_value": "minimum", "max_value": "maximum"}
    if isinstance(field, serializers.ListField):
        bounds = {"min_length": "minItems", "max_length": "maxItems"}
        if not field.allow_empty:
            said["minItems"] = field.min_length or 1
    elif isinstance(field, serializers.CharField):
        bounds = {"max_length": "maxLength"}
    for attribute, keyword in bounds.items():
        if getattr(field, attribute, None) is not None:
            said[keyword] = getattr(field, attribute)
    if isinstance(field, serializers.ChoiceField):
        said["enum"] = sorted(field.choices)
    if field.default is not serializers.empty:
        said["default"] = field.default() if callable(field.default) else field.default
    return said


def check_fields(serializer: serializers.Serializer, schema: dict) -> None:
    """Each field of the serializer is a property of the schema with the same bounds, type
    nullness and default, its required ones required; a list's or a map's items alike."""
    schema = resolved(schema)
    fields, properties = serializer.fields, schema["properties"]
    assert sorted(properties) == sorted(fields)
    assert sorted(schema.get("required", [])) == sorted(n for n, f in fields.items() if f.required)
    for name, field in fields.items():
        said = resolved(properties[name])
        if "enum" in said:
            said["enum"] = sorted(said["enum"])
        assert implied(field).items() <= said.items(), name
        assert field.allow_null == ("null" in kinds(said)), name
        child = getattr(field, "child", None)
        inner = said.get("items") or said.get("additionalProperties")
        if isinstance(child, serializers.Serializer):
            check_fields(child, inner)
        elif child is not None:
            assert implied(child).items() <= resolved(inner).items(), name


@pytest.mark.parametrize(
    ("serializer", "schema"),
    [
        (SubmitSerializer, "Submission"),
        (CancelJobsSerializer, "CancelJobsRequest"),
        (RequeueSerializer, "RequeueRequest"),
        (PrioritySerializer, "PriorityChange"),
        (ShardLimitSerializer, "ShardLimitChange"),
        (MinWorkersSerializer, "MinWorkersChange"),
        (RuntimeLimitSerializer, "RuntimeLimitChange"),
        (RequestSerializer, "RequestChange"),
        (ConstraintsSerializer, "ConstraintsChange"),
        (DependenciesSerializer, "DependenciesChange"),
        (RelabelSerializer, "LabelsChange"),
        (NotificationsSerializer, "NotificationsChange"),
        (RetriesSerializer, "RetriesChange"),
        (ResubmitSerializer, "ResubmitRequest"),
        (WindowAsked, "WindowRequest"),
        (BookingAsked, "BookingRequest"),
    ],
)
def test_a_request_schema_has_its_serializers_fields_and_bounds(serializer, schema):
    check_fields(serializer(), SCHEMAS[schema])


# Real answers against the schemas the document gives for them.


def closed(schema, top: bool = True):
    """The schema refusing, in every object, the properties no part of it names. `top` false:
    an allOf's member, or a component, which the schema naming it closes (a member closed on
    its own would refuse its siblings' properties)."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "allOf":
            out[key] = [closed(member, top=False) for member in value]
        elif key == "properties":
            out[key] = {name: closed(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf"):
            out[key] = closed(value)
        else:
            out[key] = value
    if top and "$ref" in out:
        return {"allOf": [out], "unevaluatedProperties": False}
    if top and ("properties" in out or "allOf" in out):
        out["unevaluatedProperties"] = False
    return out


def strict(document: dict) -> dict:
    """The document with every schema in it closed."""
    document = copy.deepcopy(document)
    components = document["components"]["schemas"]
    for name, schema in components.items():
        components[name] = closed(schema, top=False)

    def close_schemas(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "schema":
                    node[key] = closed(value)
                else:
                    close_schemas(value)
        elif isinstance(node, list):
            for item in node:
                close_schemas(item)

    close_schemas(document["paths"])
    close_schemas({k: v for k, v in document["components"].items() if k != "schemas"})
    return document


REGISTRY = Registry().with_resource(URI, DRAFT202012.create_resource(strict(DOCUMENT)))
PATHS = {shape(path): path for path in DOCUMENT["paths"]}


def pointer(*parts: str) -> str:
    return "".join("/" + quote(part.replace("~", "~0").replace("/", "~1")) for part in parts)


def at(ref: str) -> tuple[list[str], dict]:
    """The object a local $ref names, and the path to it."""
    parts = ref.removeprefix("#/").split("/")
    found = DOCUMENT
    for part in parts:
        found = found[part]
    return parts, found


def schema_of(url: str, method: str, status: int, media: str) -> dict:
    """The schema the document gives for the answer (a $ref into it), asserting it documents
    the status and the media type."""
    path = PATHS[shape(resolve(urlsplit(url).path).route)]
    where = ["paths", path, method, "responses", str(status)]
    answer = DOCUMENT["paths"][path][method]["responses"].get(str(status))
    assert answer is not None, f"{method.upper()} {path}: {status} is not documented"
    if "$ref" in answer:
        where, answer = at(answer["$ref"])
    assert media in answer.get("content", {}), f"{method.upper()} {path} {status}: no {media}"
    return {"$ref": URI + "#" + pointer(*where, "content", media, "schema")}


def body_schema(url: str, method: str) -> dict:
    """The schema the document gives for the request's JSON body (a $ref into it)."""
    path = PATHS[shape(resolve(urlsplit(url).path).route)]
    assert "requestBody" in DOCUMENT["paths"][path][method], f"{method.upper()} {path}: no body"
    where = ["paths", path, method, "requestBody", "content", "application/json", "schema"]
    return {"$ref": URI + "#" + pointer(*where)}


def check(schema: dict, instance) -> None:
    validator = Draft202012Validator(
        schema, registry=REGISTRY, format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    # The deepest first: an object's unevaluated properties follow from its members' errors.
    errors = sorted(validator.iter_errors(instance), key=lambda e: -len(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message[:300]}" for e in errors)


def call(client, method: str, url: str, status: int, body=None):
    """The answer to the call, its status `status`, its body (and the request's) as the
    document describes them; its JSON, or its text."""
    if body is not None and status < 400:  # a refusal's body may be what the document refuses
        check(body_schema(url, method), body)
    answer = getattr(client, method)(url, body, format="json")
    assert answer.status_code == status, (url, answer.content[:500])
    if status == 204:
        return None
    media = answer["Content-Type"].split(";")[0]
    data = answer.json() if media == "application/json" else answer.getvalue().decode()
    check(schema_of(url, method, status, media), data)
    return data


def api(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def world(alice, bob, alpha, east):
    """Alpha with a quota, a data volume and a rate card; east's two 8 x A100 nodes; the
    `normal` class."""
    PriorityClassFactory(name="normal", value=0)
    NodeFactory(cluster=east, name="gpu-a", gpu_count=8, features=["ib"], topology={"rack": "r1"})
    NodeFactory(cluster=east, name="gpu-b", gpu_count=8)
    QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=16)
    TenantVolumeFactory(tenant=alpha)
    Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5"))


@pytest.fixture
def root(db):
    """A platform admin."""
    return UserFactory(username="root", is_superuser=True, is_staff=True)


def running(alice) -> int:
    """Alice's training gang, submitted, placed and running, with a line of output."""
    job = call(api(alice), "post", "/api/v1/jobs/", 201, SPEC)
    cycle.run_cycle()
    attempt = Attempt.objects.get(job_id=job["id"])
    actions.mark_running(attempt.pk)
    LogChunk.objects.create(attempt=attempt, seq=0, text="epoch 1: loss 0.31")
    return job["id"]


def test_the_answers_about_jobs_match_it(world, alice):
    a = api(alice)
    job = running(alice)
    batch = call(a, "post", "/api/v1/jobs/", 201, BATCH)["id"]
    first = call(a, "post", "/api/v1/jobs/", 201, {**SPEC, "idempotency_key": "k1"})
    assert call(a, "post", "/api/v1/jobs/", 200, {**SPEC, "idempotency_key": "k1"}) == first
    waits = {**SPEC, "name": "big", "workers": 4, "gpus": 8, "depends_on": [job, {"id": batch}]}
    big = call(a, "post", "/api/v1/jobs/", 201, waits)["id"]
    cycle.run_cycle()

    for url in ["/api/v1/jobs/", "/api/v1/jobs/?fold=1", "/api/v1/jobs/?state=queued,running",
                f"/api/v1/jobs/?batch={batch}", f"/api/v1/jobs/{job}/", f"/api/v1/jobs/{batch}/",
                f"/api/v1/jobs/{big}/", f"/api/v1/jobs/{job}/events/?last=2",
                f"/api/v1/jobs/{job}/spec/", f"/api/v1/jobs/{big}/spec/",
                f"/api/v1/jobs/{job}/logs/", f"/api/v1/jobs/{job}/logs/?last=5&grep=loss",
                f"/api/v1/jobs/{job}/logs.txt"]:  # fmt: skip
        call(a, "get", url, 200)
    call(a, "post", "/api/v1/jobs/test/", 200, {**SPEC, "gpus": 8, "begin": "now+1h"})


def test_the_answers_to_changes_of_a_job_match_it(world, alice):
    a = api(alice)
    job = running(alice)
    queued = call(a, "post", "/api/v1/jobs/", 201, {**SPEC, "workers": 4, "gpus": 8})["id"]
    batch = call(a, "post", "/api/v1/jobs/", 201, BATCH)["id"]
    url = f"/api/v1/jobs/{queued}"

    call(a, "post", f"{url}/priority/", 200, {"priority": 5})
    call(a, "post", f"/api/v1/jobs/{batch}/shard-limit/", 200, {"max_running_shards": 2})
    call(a, "post", f"{url}/min-workers/", 200, {"min_workers": 2})
    call(a, "post", f"{url}/runtime-limit/", 200, {"max_runtime_s": 5400})
    call(a, "post", f"{url}/request/", 200, {"cpu_milli": 4000})
    call(a, "post", f"{url}/constraints/", 200, {"gpu_types": ["A100"], "features": ["ib"]})
    call(a, "post", f"{url}/dependencies/", 200, {"depends_on": [{"id": job, "kind": "afterany"}]})
    call(a, "post", f"{url}/labels/", 200, {"labels": {"keep": "best"}, "remove": ["project"]})
    call(a, "post", f"{url}/notifications/", 200, {"notify_start": True})
    call(a, "post", f"{url}/retries/", 200, {"max_retries": 5, "retry_exit_codes": [75]})
    call(a, "post", f"{url}/hold/", 200)
    call(a, "post", f"{url}/release/", 200)
    call(a, "post", f"/api/v1/jobs/{job}/requeue/", 202, {"hold": True})
    call(a, "post", f"{url}/cancel/", 202)
    call(a, "post", f"{url}/resubmit/", 201, {"idempotency_key": "again"})
    call(a, "post", "/api/v1/jobs/cancel/", 202, {"labels": {"project": "llm"}, "state": "queued"})


def test_the_answers_to_a_holder_of_a_cancel_grant_alone_match_it(world, alice, charlie):
    """Charlie, of another team, may cancel Alice's job but not read it: the answers say its id,
    its state and what changed, no more."""
    job = call(api(alice), "post", "/api/v1/jobs/", 201, {**SPEC, "workers": 4, "gpus": 8})["id"]
    assign_perm("cancel_job", charlie, Job.objects.get(pk=job))
    c = api(charlie)

    changes = [
        ("labels", {"labels": {"seen": "no"}}), ("hold", None), ("release", None),
        ("priority", {"priority": 1}), ("min-workers", {"min_workers": 2}),
        ("runtime-limit", {"max_runtime_s": 600}), ("request", {"memory_mb": 1000}),
        ("constraints", {"exclusive": False}), ("notifications", {"notify_requeue": True}),
        ("retries", {"max_retries": 1}), ("dependencies", {"depends_on": []}),
    ]  # fmt: skip
    for verb, body in changes:
        call(c, "post", f"/api/v1/jobs/{job}/{verb}/", 200, body)
    call(c, "post", f"/api/v1/jobs/{job}/cancel/", 202)


def test_the_answers_about_the_platform_and_the_teams_match_it(world, alice, settings):
    settings.MLSCHED_LINE_EVERY_S = 0  # each cycle records the line it leaves
    a = api(alice)
    running(alice)
    waiting = call(a, "post", "/api/v1/jobs/", 201, {**SPEC, "workers": 4, "gpus": 8})["id"]
    cycle.run_cycle()  # a line recorded, a job waiting in it

    assert call(a, "get", f"/api/v1/jobs/{waiting}/", 200)["standing"] is not None

    for url in ["/api/v1/queue/", "/api/v1/queue/?mine=1&limit=10", "/api/v1/quotas/",
                "/api/v1/priority-classes/", "/api/v1/volumes/", "/api/v1/rates/",
                "/api/v1/rates/?at=1999-12-31", "/api/v1/me/",
                "/api/v1/clusters/", "/api/v1/nodes/?cluster=east", "/api/v1/maintenance/",
                "/api/v1/bookings/", "/api/v1/usage/",
                "/api/v1/usage/?by_label=project&by_user=1&by_class=true",
                "/api/v1/tenants/alpha/members/", "/api/v1/tenants/alpha/secrets/"]:  # fmt: skip
        call(a, "get", url, 200)
    call(a, "get", "/api/v1/rates/?at=soon", 400)
    UserFactory(username="dave")
    call(a, "post", "/api/v1/tenants/alpha/members/", 201, {"username": "dave", "role": "viewer"})
    call(a, "patch", "/api/v1/tenants/alpha/members/dave/", 200, {"role": "member"})
    call(a, "delete", "/api/v1/tenants/alpha/members/dave/", 204)
    secret = "/api/v1/tenants/alpha/secrets/WANDB_KEY/"
    call(a, "put", secret, 201, {"value": "s3cret"})
    call(a, "put", secret, 200, {"value": "pw", "registry": "ghcr.io", "username": "bot"})
    call(a, "put", secret, 409, {"value": "x", "replaces": "variable"})
    call(a, "get", "/api/v1/tenants/alpha/secrets/", 200)
    call(a, "delete", secret, 204)


def test_the_answers_to_a_platform_admin_match_it(world, alice, root):
    job = running(alice)
    admin = api(root)
    SignIn.objects.create(username="mallory", method=SignIn.Method.PASSWORD, succeeded=False,
                          address="10.0.0.9", reason="wrong password")  # fmt: skip

    window = call(admin, "post", "/api/v1/maintenance/", 201, {
        "cluster": "east", "nodes": [], "starts_at": "now+30m", "ends_at": "now+2h",
        "reason": "new PSUs"})["id"]  # fmt: skip
    booking = call(admin, "post", "/api/v1/bookings/", 201, {
        "tenant": "alpha", "cluster": "east", "nodes": ["gpu-b"], "starts_at": "now+3h",
        "ends_at": "now+4h"})["id"]  # fmt: skip
    assert call(api(alice), "get", f"/api/v1/jobs/{job}/", 200)["window_ahead"] is not None
    for url in ["/api/v1/nodes/", "/api/v1/clusters/", "/api/v1/maintenance/",
                "/api/v1/bookings/?tenant=alpha", "/api/v1/usage/?tenant=alpha"]:  # fmt: skip
        call(admin, "get", url, 200)
    call(admin, "post", "/api/v1/nodes/east/gpu-b/cordon/", 200, {"reason": "bad DIMM"})
    call(admin, "post", "/api/v1/nodes/east/gpu-a/drain/", 200, {"reason": "flaky NCCL"})
    call(admin, "post", "/api/v1/nodes/east/gpu-b/uncordon/", 200)
    call(admin, "post", "/api/v1/tenants/alpha/pause/", 200, {"reason": "an incident"})
    call(admin, "post", "/api/v1/tenants/alpha/resume/", 200)
    teams = "tenants:\n  - slug: alpha\n    fair_share_weight: 2\n"
    call(admin, "post", "/api/v1/tenants/apply/", 200, {"document": teams, "dry_run": True})
    call(admin, "get", "/api/v1/tenants/export/?tenant=alpha", 200)
    call(admin, "get", "/api/v1/tenants/export/?tenant=nope", 400)
    call(admin, "delete", f"/api/v1/maintenance/{window}/", 204)
    call(admin, "delete", f"/api/v1/bookings/{booking}/", 204)
    call(admin, "get", "/api/v1/history/?kind=node&limit=2", 200)
    call(admin, "get", "/api/v1/sign-ins/?failed=1", 200)


def test_the_answers_to_the_command_lines_login_and_logout_match_it(world, alice):
    anyone = api()
    started = call(anyone, "post", "/api/v1/cli-logins/", 201, {"name": "mlsched CLI on laptop"})
    poll = {"device_code": started["device_code"]}

    assert call(anyone, "post", "/api/v1/cli-logins/token/", 400, poll)["error"] == (
        "authorization_pending"
    )
    CliLogin.objects.update(last_polled=None)  # polled again after its interval
    cli_logins.approve(cli_logins.waiting(started["user_code"]), alice)
    key = call(anyone, "post", "/api/v1/cli-logins/token/", 200, poll)["token"]
    with_token = APIClient(HTTP_AUTHORIZATION=f"Token {key}")
    assert call(with_token, "get", "/api/v1/me/", 200)["token"]["read_only"] is False
    call(with_token, "delete", "/api/v1/me/token/", 204)
    call(with_token, "get", "/api/v1/me/", 401)


def test_its_refusals_match_it(world, alice, bob, charlie, settings):
    a = api(alice)
    job = call(a, "post", "/api/v1/jobs/", 201, {**SPEC, "workers": 4, "gpus": 8})["id"]
    bad = {**SPEC, "cpu_milli": 0, "env": {"1LR": "x"}, "volumes": [{"name": "imagenet"}]}
    _, read_only = tokens.create_token(alice, "ci", read_only=True)

    refusals = [
        (a, "post", "/api/v1/jobs/", 400, bad),
        (a, "post", f"/api/v1/jobs/{job}/priority/", 400, {}),
        (a, "get", "/api/v1/jobs/?state=lost&mine=maybe", 400, None),
        (a, "get", f"/api/v1/jobs/{job}/events/?last=0", 400, None),
        (a, "get", "/api/v1/usage/?since=2026-02-30", 400, None),
        (a, "delete", "/api/v1/me/token/", 400, None),
        (api(), "get", "/api/v1/jobs/", 401, None),
        (api(), "post", "/api/v1/cli-logins/token/", 400, {"device_code": "made-up"}),
        (APIClient(HTTP_AUTHORIZATION=f"Token {read_only}"), "post", "/api/v1/jobs/", 403, SPEC),
        (a, "get", "/api/v1/history/", 403, None),
        (api(bob), "post", "/api/v1/tenants/alpha/members/", 403, {"username": "charlie"}),
        (api(charlie), "get", f"/api/v1/jobs/{job}/", 404, None),
        (a, "get", "/api/v1/jobs/999999/spec/", 404, None),
        (a, "get", "/api/v1/tenants/gamma/secrets/", 404, None),
    ]
    for client, method, url, status, body in refusals:
        call(client, method, url, status, body)
    call(a, "post", f"/api/v1/jobs/{job}/cancel/", 202)
    call(a, "post", f"/api/v1/jobs/{job}/cancel/", 409)
    settings.MLSCHED_API_RATE = "1/minute"
    dave = UserFactory(username="dave")
    call(api(dave), "get", "/api/v1/me/", 200)
    call(api(dave), "get", "/api/v1/me/", 429)


def test_it_is_served_to_anyone_as_written_and_as_json(db):
    as_yaml = api().get("/api/v1/openapi.yaml")
    as_json = api().get("/api/v1/openapi.json")

    assert (as_yaml.status_code, as_yaml["Content-Type"]) == (200, "application/yaml")
    assert (as_json.status_code, as_json["Content-Type"]) == (200, "application/json")
    assert as_yaml.content.decode() == WRITTEN
    assert yaml.safe_load(as_yaml.content) == as_json.json() == DOCUMENT
