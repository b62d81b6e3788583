"""The admin of what a tenant's jobs are given beyond resources: their secrets (set by
platform admins and the tenant's own admins) and their data volumes (a platform admin's).
Neither is deleted while jobs not yet ended use it (admin_scope.RefusedWhileInUse)."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models.constants import LOOKUP_SEP

from quotas import tenant_secrets, tenant_volumes
from quotas.admin_scope import (
    BulkActions,
    LookupsChecked,
    PlatformOnly,
    RefusedWhileInUse,
    TenantScoped,
)
from quotas.models import TenantSecret, TenantVolume, administered_tenants, registry_name


class TenantSecretForm(forms.ModelForm):
    """A secret's name and tenant, and its value, write-only: never drawn back into the page
    (not after a refused save either), required for a new secret, left blank to keep the stored
    one (a registry credential's registry or user, or whether jobs get it as a file, is changed
    with its value typed again). The save is `tenant_secrets.put`, made here, once Django's own
    checks (a name's rules, one secret of a name per tenant) have passed: the verb checks under
    the tenant's lock (at most so many secrets, one credential a registry, never a credential
    as a file) and writes in one step, and what it refuses still reaches the form's fields
    (`as_file` for a credential given as a file, as the model's constraint would not say),
    nothing written."""

    value = forms.CharField(
        required=False,
        strip=False,  # stored as typed, as the API stores it
        # new-password: the browser would otherwise fill in the admin's own saved password.
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Never shown again, here or anywhere.",
    )
    by = None  # the admin saving it: set per request by TenantSecretAdmin.get_form

    class Meta:
        model = TenantSecret
        fields = ["tenant", "name", "registry", "username", "as_file"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["value"].help_text += " Leave it blank to keep the value stored."
        else:
            self.fields["value"].required = True

    def _get_validation_exclusions(self):
        # The verb checks the registry, the user and as_file, saying which field is wrong (and
        # which secret holds the registry already): the model's constraints on them would name
        # none.
        return super()._get_validation_exclusions() | {"registry", "username", "as_file"}

    def _post_clean(self):
        super()._post_clean()
        value = self.cleaned_data.get("value")
        if self.errors:
            return
        if not value:
            if self.kind_changed() and self.instance.pk:
                self.add_error(
                    "value",
                    "Type the value again to change the registry or user, or whether jobs get "
                    "it as a file.",
                )
            return
        try:
            self.instance, _ = tenant_secrets.put(
                self.instance.tenant, self.instance.name, value, by=self.by,
                registry=self.cleaned_data.get("registry", ""),
                username=self.cleaned_data.get("username", ""),
                as_file=self.cleaned_data.get("as_file", False),
            )  # fmt: skip
        except ValidationError as refused:
            for field, problems in refused.message_dict.items():
                # A stored secret's name is not a field of its form (a rename is a new secret).
                self.add_error(field if field in self.fields else None, problems)

    def kind_changed(self) -> bool:
        """Whether the registry, the user or as_file given differ from the stored ones. The
        registry is compared as the verb stores it (``registry_name``): GHCR.io for a stored
        ghcr.io, or index.docker.io for docker.io, is the same registry, and asks for no value."""
        typed = self.cleaned_data.get("registry") or ""
        stored = self.initial.get("registry") or ""
        changed = {"username", "as_file"} & set(self.changed_data)
        return bool(changed) or registry_name(typed) != registry_name(stored)


@admin.register(TenantSecret)
class TenantSecretAdmin(
    TenantScoped, RefusedWhileInUse, BulkActions, LookupsChecked, admin.ModelAdmin
):
    """Tenants' secrets, set and deleted by platform admins for every tenant and by tenant
    admins for the tenants they own, through the verbs the API uses (quotas.tenant_secrets).
    Their values are never shown, nor their sealed form. A secret that jobs not yet ended name
    is not deleted: the admin is told which jobs."""

    form = TenantSecretForm
    list_display = ["name", "tenant", "registry", "username", "as_file", "updated", "updated_by"]
    list_select_related = ["tenant", "updated_by"]
    search_fields = ["name"]
    actions = ["delete_selected"]
    tenant_path = "tenant"
    noun = "secret"

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "name", "registry", "username", "as_file", "value"]
        # A page only to view shows every field it lists as read-only, and Django reads a
        # read-only `value` as TenantSecret.value(): the secret, opened.
        value = ["value"] if self.has_change_permission(request, obj) else []
        fields = ["tenant", "name", "registry", "username", "as_file", *value]
        return [*fields, "updated", "updated_by"]

    def get_readonly_fields(self, request, obj=None):
        # Another name or tenant is another secret: delete this one and add that.
        return () if obj is None else ("tenant", "name", "updated", "updated_by")

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)  # a class of this request's
        form.by = request.user
        return form

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "tenant":
            kwargs["queryset"] = administered_tenants(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def lookup_allowed(self, lookup, value, request):
        # Nor is the sealed form read out through the list, guess by guess (`?sealed__regex=`).
        if lookup.split(LOOKUP_SEP)[0] == "sealed":
            return False
        return super().lookup_allowed(lookup, value, request)

    def save_model(self, request, obj, form, change):
        pass  # saved by its form's put (TenantSecretForm), in the admin's same transaction

    def delete_row(self, obj) -> None:
        tenant_secrets.delete(obj.tenant, obj.name)


class TenantVolumeForm(forms.ModelForm):
    """A volume's page. A volume jobs not yet ended write to stays writable until they have
    ended: their workers were promised it (the run spec reads each job's own read_only)."""

    class Meta:
        model = TenantVolume
        fields = ["tenant", "name", "description", "claim", "host_path", "writable", "clusters"]

    def clean_writable(self):
        writable = self.cleaned_data["writable"]
        if not writable and (problem := tenant_volumes.closing_problem(self.instance)):
            raise ValidationError(problem)
        return writable


@admin.register(TenantVolume)
class TenantVolumeAdmin(
    TenantScoped, PlatformOnly, RefusedWhileInUse, BulkActions, LookupsChecked,
    admin.ModelAdmin,
):  # fmt: skip
    """Tenants' data volumes: what a tenant's jobs may mount, read or write, on the hosts and
    clusters every tenant's work runs on, is the platform's decision, so platform admins add,
    change and delete them; a tenant admin sees their own tenants'. A volume that jobs not yet
    ended mount is not deleted (nor renamed, nor moved to another tenant: those are another
    volume): the admin is told which jobs."""

    form = TenantVolumeForm
    list_display = ["name", "tenant", "claim", "host_path", "writable", "on_clusters"]
    list_select_related = ["tenant"]
    search_fields = ["name", "description", "claim", "host_path"]
    filter_horizontal = ["clusters"]
    actions = ["delete_selected"]
    tenant_path = "tenant"
    noun = "volume"

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("clusters")

    def get_readonly_fields(self, request, obj=None):
        # Another name or tenant is another volume: add that one, then delete this one.
        return () if obj is None else ("tenant", "name")

    @admin.display(description="clusters")
    def on_clusters(self, volume: TenantVolume) -> str:
        return ", ".join(sorted(c.name for c in volume.clusters.all())) or "every cluster"

    def delete_row(self, obj) -> None:
        tenant_volumes.delete(obj)
