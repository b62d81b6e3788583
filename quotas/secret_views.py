"""The portal's secrets page (``/secrets/``): each of the user's teams' secrets by name, with
its kind (a variable, a file, or a registry credential's registry and user) and when and by
whom each was set; a team's owners set one (name and value, typed or read from a file chosen,
whether jobs get it as a file, and for a credential its registry and user: created, or
replaced) and delete one there, through
the verbs the API and the admin use (``quotas.tenant_secrets``). No value is ever drawn back
into a page."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from jobs import access
from jobs.forms import described
from quotas import tenant_secrets
from quotas.models import MAX_SECRET_CHARS, Membership, TenantSecret

HELPS = {"registry": "registry-help", "username": "username-help", "as_file": "as-file-help",
         "value_file": "value-file-help"}  # fmt: skip


def owned_slugs(user) -> set[str]:
    """The slugs of the teams whose secrets the user sets: those they own (every team for a
    platform admin)."""
    if user.is_superuser:
        return set(access.report_tenants(user).values_list("slug", flat=True))
    return set(
        Membership.objects.filter(user=user, role=Membership.Role.OWNER).values_list(
            "tenant__slug", flat=True
        )
    )


def value_posted(request) -> str:
    """The value typed, or the whole text of the file chosen (its newlines kept, which a
    password field drops: a key or a kubeconfig given as a file); a ValidationError on
    `value` for both, or on `value_file` for a file too large or not UTF-8 text."""
    typed, upload = request.POST.get("value", ""), request.FILES.get("value_file")
    if upload is None:
        return typed
    if typed:
        raise ValidationError({"value": ["Type the value or choose a file, not both."]})
    if upload.size > MAX_SECRET_CHARS * 4:  # UTF-8: at most 4 bytes a character
        raise ValidationError({"value_file": [f"At most {MAX_SECRET_CHARS:,} characters."]})
    try:
        return upload.read().decode()
    except UnicodeDecodeError:
        raise ValidationError({"value_file": ["A file of UTF-8 text."]}) from None


@login_required
def secrets_page(request):
    owned = owned_slugs(request.user)
    values, errors, status = dict.fromkeys(["tenant", "name", "registry", "username"], ""), {}, 200
    as_file = False
    if request.method == "POST":
        values = {key: request.POST.get(key, "") for key in values}
        as_file = "as_file" in request.POST  # an unchecked box is not sent
        tenant = access.report_tenants(request.user).filter(slug=values["tenant"]).first()
        if tenant is None or tenant.slug not in owned:
            errors, status = {"tenant": "Choose a team you own."}, 400
        else:
            try:
                _, created = tenant_secrets.put(
                    tenant, values["name"], value_posted(request), by=request.user,
                    registry=values["registry"], username=values["username"], as_file=as_file,
                    recorded_as="on the portal's secrets page",
                )  # fmt: skip
            except ValidationError as refused:
                errors = {field: " ".join(texts) for field, texts in refused.message_dict.items()}
                status = 400
            else:
                done = "created" if created else "replaced"
                messages.success(request, f"Secret {values['name']} of {tenant.slug} {done}.")
                return redirect("secrets")
    listed = TenantSecret.objects.select_related("updated_by")
    teams = (
        access.report_tenants(request.user)
        .order_by("name")
        .prefetch_related(Prefetch("secrets", queryset=listed))
    )
    context = {
        "teams": teams,
        "owned": owned,
        "values": values,
        "as_file": as_file,
        "errors": errors,
        "fields": described(errors, helps=HELPS),
    }
    return render(request, "portal/secrets.html", context, status=status)


@login_required
@require_POST
def delete_secret(request, slug, name):
    # Only a team the user owns: any other is a 404, as if it did not exist.
    if slug not in owned_slugs(request.user):
        raise Http404("No such secret.")
    tenant = get_object_or_404(access.report_tenants(request.user), slug=slug)
    try:
        deleted = tenant_secrets.delete(tenant, name, request.user, "on the portal's secrets page")
    except tenant_secrets.InUse as in_use:
        messages.error(request, f"Secret {name} of {slug} not deleted. {in_use}")
        return redirect("secrets")
    if not deleted:
        raise Http404("No such secret.")
    messages.success(request, f"Secret {name} of {slug} deleted.")
    return redirect("secrets")
