"""A tenant's secrets through the API (``quotas.tenant_secrets``), whose values never come
back out:

- ``GET /api/v1/tenants/<slug>/secrets/``: their names, kinds, when each was set and by whom,
  to every member of the tenant (viewers included: a job names them) and platform admins;
- ``PUT /api/v1/tenants/<slug>/secrets/<name>/`` with ``{"value": "..."}``: set one, created
  (201) or replaced (200), by the tenant's owners and platform admins; with ``"as_file":
  true``, one its jobs get as a file; with ``"registry"`` and ``"username"`` instead, a pull
  credential for the images of that registry (its password or token the value). A put
  replaces the whole secret: without them, it is a variable. With ``"replaces"``, the kind
  the caller read (``none``, ``variable``, ``file``, ``credential``, as the list gives them),
  nothing is written if the secret is of another kind by then: 409 naming ``replaces``, with
  the stored ``kind``;
- ``DELETE`` of the same: 204, 409 while jobs not yet ended name it.

Another team's tenant is a 404, as an unknown one is; a member who may not change its
secrets gets a 403; a field a put does not take, a 400 naming it.
"""

from django.core.exceptions import ValidationError as ModelValidationError
from django.http import Http404
from rest_framework import status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import access
from jobs.fields import body_of
from quotas import tenant_secrets
from quotas.models import Membership, Tenant, TenantSecret


def tenant_for(request, slug: str, change: bool = False) -> Tenant:
    """The tenant ``slug`` if the caller belongs to it (any tenant for a platform admin); with
    ``change``, only if they may change its secrets: its owners."""
    tenant = access.report_tenants(request.user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("No such tenant.")
    owner = tenant.memberships.filter(user=request.user, role=Membership.Role.OWNER).exists()
    if change and not (request.user.is_superuser or owner):
        raise PermissionDenied("Only the tenant's owners set and delete its secrets.")
    return tenant


def as_json(secret: TenantSecret) -> dict:
    by = secret.updated_by
    return {"name": secret.name, "kind": tenant_secrets.kind_of(secret),
            "registry": secret.registry or None,
            "username": secret.username or None, "as_file": secret.as_file,
            "updated": secret.updated,
            "updated_by": by.get_username() if by else None}  # fmt: skip


class SecretsView(APIView):
    def get(self, request, slug):
        tenant = tenant_for(request, slug)
        secrets = TenantSecret.objects.filter(tenant=tenant).select_related("updated_by")
        return Response({"tenant": tenant.slug, "secrets": [as_json(s) for s in secrets]})


class SecretView(APIView):
    def put(self, request, slug, name):
        tenant = tenant_for(request, slug, change=True)
        data = body_of(request, "value", "as_file", "registry", "username", "replaces")
        try:
            secret, created = tenant_secrets.put(
                tenant, name, data.get("value"), by=request.user,
                registry=data.get("registry") or "", username=data.get("username") or "",
                as_file=data.get("as_file", False),  # not true or false: the verb refuses it
                replaces=data.get("replaces"), recorded_as="through the API",
            )  # fmt: skip
        except ModelValidationError as error:
            raise ValidationError(error.message_dict) from None
        except tenant_secrets.Changed as changed:
            answer = {"replaces": [str(changed)], "kind": changed.stored}
            return Response(answer, status=status.HTTP_409_CONFLICT)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(as_json(secret), status=code)

    def delete(self, request, slug, name):
        tenant = tenant_for(request, slug, change=True)
        try:
            deleted = tenant_secrets.delete(tenant, name, request.user, "through the API")
        except tenant_secrets.InUse as in_use:
            return Response(
                {"detail": str(in_use), "jobs": in_use.job_ids}, status=status.HTTP_409_CONFLICT
            )
        if not deleted:
            raise Http404("No such secret.")
        return Response(status=status.HTTP_204_NO_CONTENT)
