"""Tenants' secrets (``TenantSecret``): setting and deleting them, giving them to the jobs
that name them as those start; and the tenants' registry credentials, given with the jobs whose
images come from those registries. Keeping the values out of those jobs' logs is
``quotas.secret_masking``'s.

A job names secrets (``Job.secrets``); their values are read when an attempt of it is handed
to its cluster's agent (``opened``), so a secret replaced while the job waits gives it the new
value, and a job whose secret cannot be read then fails before it runs, saying which. A
secret that a job not yet ended names cannot be deleted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from quotas import history, vault
from quotas.models import (
    MAX_SECRET_CHARS,
    MAX_SECRETS_PER_TENANT,
    MAX_USERNAME_CHARS,
    Tenant,
    TenantSecret,
    image_registry,
    registry_name,
    validate_registry,
    validate_secret_name,
)

MAX_SECRETS_PER_JOB = 50


class InUse(Exception):
    """A tenant's secret or data volume that jobs not yet ended use: ``what`` they do with it
    ("name the secret 'X'") and what may be done ``then``."""

    def __init__(self, what: str, job_ids: list[int], then: str):
        listed = ", ".join(str(pk) for pk in job_ids[:10])
        more = f" and {len(job_ids) - 10} more" if len(job_ids) > 10 else ""
        super().__init__(f"Jobs not yet ended {what} ({listed}{more}): {then}")
        self.job_ids = job_ids


def secret_in_use(name: str, job_ids: list[int]) -> InUse:
    return InUse(
        f"name the secret {name!r}", job_ids, "it can be deleted once they have ended, or "
        "replaced now."
    )  # fmt: skip


# What a tenant's secret is, as `put`'s ``replaces`` names it: "none" for no secret.
KINDS = ("none", "variable", "file", "credential")
SAID = {"none": "not set", "variable": "an environment variable", "file": "a file",
        "credential": "a registry credential"}  # fmt: skip


class Changed(Exception):
    """A secret that is no longer of the kind its setter read."""

    def __init__(self, name: str, stored: str, read: str):
        super().__init__(
            f"{name!r} changed meanwhile: it is {SAID[stored]} now, {SAID[read]} when read."
        )
        self.stored = stored


def kind_of(secret: TenantSecret | None) -> str:
    """The secret's kind (KINDS)."""
    if secret is None:
        return "none"
    if secret.registry:
        return "credential"
    return "file" if secret.as_file else "variable"


def value_problem(value: object) -> str:
    """Why a value cannot be a secret; "" if it can."""
    if not isinstance(value, str) or not value:
        return "A secret's value is some text."
    if len(value) > MAX_SECRET_CHARS:
        return f"A secret's value is at most {MAX_SECRET_CHARS:,} characters."
    if "\x00" in value:
        return "An environment variable cannot hold a NUL character."
    return ""


@transaction.atomic
def put(
    tenant: Tenant,
    name: str,
    value: str,
    by=None,
    registry: str = "",
    username: str = "",
    as_file: bool = False,
    replaces: str | None = None,
    recorded_as: str = "",
) -> tuple[TenantSecret, bool]:
    """Set the tenant's secret ``name`` to ``value``, created or replaced; (secret, created).
    With a ``registry``, it is the tenant's pull credential there, of ``username``; without,
    one its jobs name: given to them in an environment variable, or ``as_file`` in a file
    whose path that variable holds. ValidationError by field (``name``: a bad one, or one
    secret past the tenant's limit; ``value``; ``registry``: a bad host, one the tenant has
    another credential for, or a variable jobs not yet ended name; ``username``; ``as_file``:
    not true or false, or with a registry; ``replaces``: not a kind), nothing written. With
    ``replaces``, the kind the caller read (KINDS: "none" for no secret), it is set only if
    the stored secret is still of that kind, else Changed: what a user was told they replace
    is what they replace. A secret that jobs waiting to start name may change kind: each
    attempt gets its secrets as they are when it starts. With ``recorded_as`` (where it was
    set: "through the API"), the change is in the platform's history as ``by``'s, its value
    not (the admin records its own saves)."""
    try:
        validate_secret_name(name)
    except ValidationError as error:
        raise ValidationError({"name": error.messages}) from None
    problem = value_problem(value)
    if problem:
        raise ValidationError({"value": [problem]})
    if not isinstance(as_file, bool):
        raise ValidationError({"as_file": ["Give true or false."]})
    if replaces is not None and replaces not in KINDS:
        raise ValidationError({"replaces": [f"Give one of {', '.join(KINDS)}."]})
    registry, username = credential_fields(registry, username)
    if registry and as_file:
        raise ValidationError(
            {"as_file": ["A registry credential is given to no job, as a file or otherwise."]}
        )
    Tenant.objects.select_for_update().get(pk=tenant.pk)  # one writer of its secrets at once
    if registry:
        check_credential_room(tenant, name, registry)
    secret = TenantSecret.objects.filter(tenant=tenant, name=name).first()
    if replaces is not None and (stored := kind_of(secret)) != replaces:
        raise Changed(name, stored, replaces)
    created = secret is None
    if created:
        if TenantSecret.objects.filter(tenant=tenant).count() >= MAX_SECRETS_PER_TENANT:
            raise ValidationError(
                {"name": [f"A tenant has at most {MAX_SECRETS_PER_TENANT} secrets."]}
            )
        secret = TenantSecret(tenant=tenant, name=name)
    assert secret is not None
    secret.registry, secret.username, secret.as_file = registry, username, as_file
    secret.set_value(value)
    secret.updated, secret.updated_by = timezone.now(), by
    try:
        with transaction.atomic():
            secret.save()
    except IntegrityError as error:  # pragma: no cover - the tenant's lock orders writers
        raise ValidationError({"name": [f"{name!r} was set at the same time."]}) from error
    if recorded_as:
        flag = history.ADDITION if created else history.CHANGE
        said = f"{'Created' if created else 'Replaced'} {recorded_as}: a {kind_of(secret)}"
        history.record(by, [secret], said, flag)
    return secret, created


@transaction.atomic
def delete(tenant: Tenant, name: str, by=None, recorded_as: str = "") -> bool:
    """Delete the tenant's secret ``name`` (False: it has none); InUse while jobs not yet ended
    name it. The tenant's lock keeps a submission naming it from passing meanwhile. With
    ``recorded_as``, the deletion is in the platform's history as ``by``'s."""
    Tenant.objects.select_for_update().get(pk=tenant.pk)
    users = live_jobs_naming(tenant, name)
    if users:
        raise secret_in_use(name, users)
    secret = TenantSecret.objects.filter(tenant=tenant, name=name).first()
    if secret is None:
        return False
    if recorded_as:
        history.record(by, [secret], f"Deleted {recorded_as}", history.DELETION)
    secret.delete()
    return True


def live_jobs_naming(tenant: Tenant, name: str) -> list[int]:
    """The ids of the tenant's jobs not yet ended that name the secret."""
    from jobs.models import Job

    live = Job.objects.filter(tenant=tenant).live().exclude(secrets=[])
    return sorted(pk for pk, names in live.values_list("pk", "secrets") if name in names)


def credential_fields(registry: object, username: object) -> tuple[str, str]:
    """A pull credential's registry (Docker Hub's names written docker.io, a host in lower
    case) and username, checked; ("", "") for a variable. ValidationError by field."""
    registry = registry or ""
    username = username or ""
    if not isinstance(registry, str):
        raise ValidationError({"registry": ["A registry is a host, as text."]})
    if not isinstance(username, str):
        raise ValidationError({"username": ["A username is some text."]})
    if not registry:
        if username:
            raise ValidationError({"username": ["Only a registry credential has a username."]})
        return "", ""
    registry = registry_name(registry)
    try:
        validate_registry(registry)
    except ValidationError as error:
        raise ValidationError({"registry": error.messages}) from None
    if not username:
        raise ValidationError({"username": ["A registry credential names its user."]})
    printable = username.isprintable() and username == username.strip() and ":" not in username
    if len(username) > MAX_USERNAME_CHARS or not printable:
        too = f"A username is at most {MAX_USERNAME_CHARS} printable characters, no ':' and no "
        too += "space at either end."
        raise ValidationError({"username": [too]})
    return registry, username


def check_credential_room(tenant: Tenant, name: str, registry: str) -> None:
    """That ``name`` may become the tenant's credential for ``registry``: the tenant has no
    other one there (which would it pull with?), and no job not yet ended names it as a
    variable (it would start without it). Under the tenant's lock."""
    other = TenantSecret.objects.filter(tenant=tenant, registry=registry).exclude(name=name).first()
    if other is not None:
        raise ValidationError(
            {"registry": [f"The team's credential for {registry} is the secret {other.name!r}: "
                          "replace or delete that one."]}
        )  # fmt: skip
    if users := live_jobs_naming(tenant, name):
        raise ValidationError({"registry": [str(secret_in_use(name, users))]})


def unusable(tenant: Tenant, names: Iterable[str]) -> str:
    """Why a job of the tenant may not name these secrets as variables, "" if it may: one of
    them is not set, or is a registry credential (no job gets those)."""
    names = set(names)
    kinds = dict(
        TenantSecret.objects.filter(tenant=tenant, name__in=names).values_list("name", "registry")
    )
    if missing := sorted(names - set(kinds)):
        return f"Tenant {tenant.slug!r} has no secret {missing[0]!r}: its owners set it first."
    if credentials := sorted(name for name, registry in kinds.items() if registry):
        name = credentials[0]
        return (
            f"{name!r} is the team's pull credential for {kinds[name]}: images from there are "
            "pulled with it, and no job gets it as a variable."
        )
    return ""


class Opened(NamedTuple):
    """A job's secrets, opened, by name: those given as environment variables, and those
    given as files."""

    variables: dict[str, str]
    files: dict[str, str]


def opened(jobs: Iterable) -> dict[int, Opened | str]:
    """For each job that names secrets, by id: their values by name, as variables and as
    files, or why they cannot be read (one of them is gone, or no key opens it). One query
    for them all."""
    jobs = [job for job in jobs if job.secrets]
    if not jobs:
        return {}
    rows = TenantSecret.objects.filter(
        tenant_id__in={job.tenant_id for job in jobs},
        name__in={name for job in jobs for name in job.secrets},
    ).values_list("tenant_id", "name", "sealed", "as_file")
    sealed = {(tenant, name): (value, as_file) for tenant, name, value, as_file in rows}
    out: dict[int, Opened | str] = {}
    for job in jobs:
        values = Opened({}, {})
        for name in job.secrets:
            if (job.tenant_id, name) not in sealed:
                out[job.pk] = f"Its secret {name!r} is no longer set in its tenant."
                break
            value, as_file = sealed[job.tenant_id, name]
            try:
                (values.files if as_file else values.variables)[name] = vault.unseal(value)
            except vault.Unreadable:
                out[job.pk] = unreadable(name)
                break
        else:
            out[job.pk] = values
    return out


def file_secrets() -> dict[int, set[str]]:
    """The names of the secrets each tenant gives as files, by tenant id."""
    found: dict[int, set[str]] = defaultdict(set)
    rows = TenantSecret.objects.filter(as_file=True).values_list("tenant_id", "name")
    for tenant, name in rows:
        found[tenant].add(name)
    return found


def unreadable(name: str) -> str:
    return (
        f"Its secret {name!r} cannot be read with the platform's keys: a tenant owner sets it "
        "again, or a platform admin restores the key it was sealed with."
    )


def pull_credentials(jobs: Iterable) -> dict[int, dict[str, str] | str]:
    """For each job whose tenant has a credential for the registry of its image, by id: it
    opened ({"registry", "username", "password"}), or why it cannot be read. One query."""
    jobs = [(job, image_registry(job.image)) for job in jobs]
    if not jobs:
        return {}
    found = {
        (secret.tenant_id, secret.registry): secret
        for secret in TenantSecret.objects.filter(
            tenant_id__in={job.tenant_id for job, _ in jobs},
            registry__in={registry for _, registry in jobs},
        )
    }
    out: dict[int, dict[str, str] | str] = {}
    for job, registry in jobs:
        secret = found.get((job.tenant_id, registry))
        if secret is None:
            continue
        try:
            password = secret.value()
        except vault.Unreadable:
            out[job.pk] = unreadable(secret.name)
        else:
            out[job.pk] = {"registry": registry, "username": secret.username, "password": password}
    return out
