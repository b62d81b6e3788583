"""SCIM 2.0's HTTP side under /scim/v2/ (quotas/scim.py says what a push does): thin views
that parse, check the identity provider's token and call one verb of quotas.scim; a list or a
read answers what its query's `filter`, `sortBy`, `sortOrder`, `attributes` and
`excludedAttributes` ask for (quotas/scim_query.py).

Where MLSCHED_SCIM_TOKEN is unset SCIM is off: every /scim/ URL is a 404. Otherwise a request
carries `Authorization: Bearer <MLSCHED_SCIM_TOKEN>`, compared in constant time, or is a 401.
CSRF-exempt: a bearer token, no cookie, authenticates it. Every answer is
`application/scim+json`; a refusal is an RFC 7644 §3.12 error (`status`, `scimType`,
`detail`) and writes nothing."""

import json

from django.conf import settings
from django.http import Http404, HttpResponse, JsonResponse
from django.urls import re_path, reverse
from django.utils.crypto import constant_time_compare
from django.views.decorators.csrf import csrf_exempt

from mlsched_site import errors
from quotas import scim, scim_discovery, scim_groups, scim_query
from quotas.scim import ScimError

CONTENT_TYPE = "application/scim+json"
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
LIST = "urn:ietf:params:scim:api:messages:2.0:ListResponse"


def answer(document: dict | None, status: int = 200, headers: dict | None = None):
    if document is None:
        return HttpResponse(status=status, content_type=CONTENT_TYPE, headers=headers)
    return JsonResponse(document, status=status, content_type=CONTENT_TYPE, headers=headers)


def refusal(error: ScimError, headers: dict | None = None):
    document = {"schemas": [ERROR], "status": str(error.status), "detail": error.detail}
    if error.scim_type:
        document["scimType"] = error.scim_type
    if error.status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": 'Bearer realm="SCIM"'}
    return answer(document, error.status, headers)


def authenticated(request) -> None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    secret = settings.MLSCHED_SCIM_TOKEN
    if not (scheme.lower() == "bearer" and constant_time_compare(token.strip(), secret)):
        raise ScimError(401, "Authorization: Bearer and the platform's SCIM token, please.")


def endpoint(**handlers):
    """A SCIM endpoint: a 404 while SCIM is off; the token checked; the handler of the
    request's method called (`get`, `post`...; a 405 for another); a refusal answered as an
    error."""

    @csrf_exempt
    def view(request, **kwargs):
        if not settings.MLSCHED_SCIM_TOKEN:
            raise Http404("SCIM provisioning is off")
        try:
            authenticated(request)
            handler = handlers.get(request.method.lower())
            if handler is None:
                raise ScimError(405, f"{request.method} is not answered here.")
            return handler(request, **kwargs)
        except ScimError as error:
            return refusal(error)
        except errors.UNAVAILABLE as lost:  # as every call's, in SCIM's error document
            errors.logged(request, lost)
            return refusal(ScimError(503, errors.UNAVAILABLE_BODY["detail"]), errors.RETRY)

    return view


def body_of(request) -> dict:
    """The request's body, a JSON object."""
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise scim.invalid(f"The body is no JSON: {str(error)[:200]}", "invalidSyntax") from None
    if not isinstance(body, dict):
        raise scim.invalid("The body is a JSON object: a resource, or a PatchOp.", "invalidSyntax")
    return body


def base(request) -> str:
    """The /scim/v2 URL as the provider reaches it."""
    return request.build_absolute_uri(reverse("scim-users")).removesuffix("/Users")


def list_response(resources: list[dict], total: int, start: int = 1) -> HttpResponse:
    return answer({"schemas": [LIST], "totalResults": total, "itemsPerPage": len(resources),
                   "startIndex": start, "Resources": resources})  # fmt: skip


def listed(request, rows, resource: scim_query.Resource, shown) -> HttpResponse:
    """A ListResponse of the page of `rows` the query's filter, sort and page ask for, each
    resource `shown`."""
    rows = scim_query.selected(rows, request.GET, resource)
    found, total, start = scim.page(rows, request.GET)
    return list_response([shown(row) for row in found], total, start)


# Users


def list_users(request):
    shape, at = scim_query.projection(request.GET, scim.USER), base(request)
    groups = shape.shows("groups")
    rows = scim.with_groups(scim.users()) if groups else scim.users()
    return listed(
        request,
        rows,
        scim_query.USERS,
        lambda user: shape.apply(scim.user_resource(user, at, groups)),
    )


def user_answer(request, pk, status: int = 200):
    """The user of id `pk` as SCIM reads them (201: just made, where they are), with the
    attributes the query asks for."""
    shape = scim_query.projection(request.GET, scim.USER)
    user = scim.user_with(str(pk))
    resource = scim.user_resource(user, base(request), shape.shows("groups"))
    headers = {"Location": resource["meta"]["location"]} if status == 201 else None
    return answer(shape.apply(resource), status, headers)


def create_user(request):
    user = scim.create_user(scim.account_of(body_of(request), whole=True))
    return user_answer(request, user.pk, 201)


def read_user(request, pk: str):
    return user_answer(request, pk)


def replace_user(request, pk: str):
    scim.change_user(pk, scim.account_of(body_of(request), whole=True))
    return user_answer(request, pk)


def patch_user(request, pk: str):
    scim.change_user(pk, scim.patched(scim.operations(body_of(request))))
    return user_answer(request, pk)


def delete_user(request, pk: str):
    scim.delete_user(pk)
    return answer(None, 204)


# Groups


def list_groups(request):
    shape, at = scim_query.projection(request.GET, scim.GROUP), base(request)
    members = shape.shows("members")
    return listed(
        request,
        scim_groups.groups(members),
        scim_query.GROUPS,
        lambda group: shape.apply(scim_groups.group_resource(group, at, members)),
    )


def group_answer(request, pk, status: int = 200):
    """The group of id `pk` as SCIM reads it (201: just made, where it is), with the
    attributes the query asks for (its members loaded only where they are asked for)."""
    shape = scim_query.projection(request.GET, scim.GROUP)
    members = shape.shows("members")
    group = scim_groups.group_with(str(pk), members)
    resource = scim_groups.group_resource(group, base(request), members)
    headers = {"Location": resource["meta"]["location"]} if status == 201 else None
    return answer(shape.apply(resource), status, headers)


def create_group(request):
    group = scim_groups.create_group(scim_groups.group_of(body_of(request)))
    return group_answer(request, group.pk, 201)


def read_group(request, pk: str):
    return group_answer(request, pk)


def replace_group(request, pk: str):
    scim_groups.replace_group(pk, scim_groups.group_of(body_of(request)))
    return group_answer(request, pk)


def patch_group(request, pk: str):
    """204, no body (RFC 7644 §3.5.2 lets it): Okta and Entra ID read none, and a big group's
    members would be a big answer."""
    scim_groups.patch_group(pk, scim.operations(body_of(request)))
    return answer(None, 204)


def delete_group(request, pk: str):
    scim_groups.delete_group(pk)
    return answer(None, 204)


# What the service provider is (RFC 7644 §4)


def service_provider_config(request):
    return answer(scim_discovery.service_provider_config(base(request)))


def resource_types(request):
    types = scim_discovery.resource_types(base(request))
    return list_response(types, len(types))


def schemas(request):
    written = scim_discovery.schemas(base(request))
    return list_response(written, len(written))


def not_found(request, **kwargs):
    raise ScimError(404, f"No such SCIM endpoint: {request.path[:200]}")


urlpatterns = [
    re_path(r"^Users/?$", endpoint(get=list_users, post=create_user), name="scim-users"),
    re_path(
        r"^Users/(?P<pk>[^/]+)/?$",
        endpoint(get=read_user, put=replace_user, patch=patch_user, delete=delete_user),
        name="scim-user",
    ),
    re_path(r"^Groups/?$", endpoint(get=list_groups, post=create_group), name="scim-groups"),
    re_path(
        r"^Groups/(?P<pk>[^/]+)/?$",
        endpoint(get=read_group, put=replace_group, patch=patch_group, delete=delete_group),
        name="scim-group",
    ),
    re_path(
        r"^ServiceProviderConfig/?$",
        endpoint(get=service_provider_config),
        name="scim-service-provider-config",
    ),
    re_path(r"^ResourceTypes/?$", endpoint(get=resource_types), name="scim-resource-types"),
    re_path(r"^Schemas/?$", endpoint(get=schemas), name="scim-schemas"),
    re_path(r"", endpoint(**dict.fromkeys(("get", "post", "put", "patch", "delete"), not_found))),
]
