"""Tenants' secrets (``TenantSecret``): setting and deleting them, giving them to the jobs
that name them as those start, and keeping them out of those jobs' logs; and the tenants'
registry credentials, given with the jobs whose images come from those registries.

A job names secrets (``Job.secrets``); their values are read when an attempt of it is handed
to its cluster's agent (``opened``), so a secret replaced while the job waits gives it the new
value, and a job whose secret cannot be read then fails before it runs, saying which. A
secret that a job not yet ended names cannot be deleted. Each value's lines of
``MASK_MIN_CHARS`` or more characters, and the value as jobs commonly print it encoded
(base64, hex, percent-encoded once or twice, JSON-escaped: ``hidden_forms``), are written
``***`` in the logs of the jobs that name it (``masks``, ``mask``), as GitHub Actions hides
its secrets: a job that prints its token, or an HTTP Basic header made of it, does not show it
to every reader of the log. Base64 and hex that a program wraps across lines (``base64`` at 76
columns, PEM at 64, ``xxd -p`` at 60) are hidden piece by piece (``cut_forms``).
"""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from functools import partial
from typing import NamedTuple
from urllib.parse import quote, quote_plus

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from quotas import vault
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

MASK = "***"
# Shorter lines of a value are left as they are: masking "1" or "ok" would blank a log.
MASK_MIN_CHARS = 4
# A base64 run is hidden when at least this many of its characters encode the value's bits
# alone: 8 characters are 48 bits, which innocent base64 (another value's, a digest) repeats by
# chance about once in 64**8 (3e14) places, and which a value of 7 bytes or more has in each of
# the three alignments. A shorter run (a 4-character value's is 5) would hide pieces of
# unrelated base64 in logs that print much of it.
BASE64_MIN_CHARS = 8
# Hex shows 4 bits a character: 12 characters are the same 48 bits.
HEX_MIN_CHARS = 12
PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")
QUOTE_ONCE_MORE = (quote_plus, partial(quote, safe=""))
URL_SAFE = str.maketrans("+/", "-_")
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
    attempt gets its secrets as they are when it starts."""
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
    return secret, created


@transaction.atomic
def delete(tenant: Tenant, name: str) -> bool:
    """Delete the tenant's secret ``name`` (False: it has none); InUse while jobs not yet ended
    name it. The tenant's lock keeps a submission naming it from passing meanwhile."""
    Tenant.objects.select_for_update().get(pk=tenant.pk)
    users = live_jobs_naming(tenant, name)
    if users:
        raise secret_in_use(name, users)
    deleted, _ = TenantSecret.objects.filter(tenant=tenant, name=name).delete()
    return bool(deleted)


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


class Cut(NamedTuple):
    """Encoded forms of values that a program may wrap across lines (``cut_forms``), longest
    first, of which a piece at a line's end is hidden when it has ``least`` characters or
    more; ``joined`` holds them one a line, where a line's ends are looked for first."""

    least: int
    forms: list[str]
    joined: str

    @classmethod
    def of(cls, least: int, forms: Iterable[str]) -> Cut:
        ordered = sorted(forms, key=lambda form: (-len(form), form))
        return cls(least, ordered, "\n".join(ordered))


class Hidden(NamedTuple):
    """What ``mask`` hides of the values a job names: ``texts``, found anywhere in a line
    (longest first, so a part of a longer one is not hidden first), and the pieces of the
    ``cut`` forms at a line's ends."""

    texts: list[str]
    cut: tuple[Cut, ...]


def masks(attempt_ids: Iterable[int]) -> dict[int, Hidden]:
    """For each of the attempts whose job names secrets, what to hide in its log: the
    ``hidden_forms`` and ``cut_forms`` of each value. Each value is opened and encoded once for
    the whole batch. Values no key opens hide nothing: the job did not get them."""
    from jobs.models import Attempt

    rows = list(
        Attempt.objects.filter(pk__in=attempt_ids)
        .exclude(job__secrets=[])
        .values_list("pk", "job__tenant_id", "job__secrets")
    )
    if not rows:
        return {}
    wanted = defaultdict(set)
    for _, tenant, names in rows:
        wanted[tenant].update(names)
    forms: dict[tuple[int, str], tuple[set[str], set[tuple[str, int]]]] = {}
    for secret in TenantSecret.objects.filter(
        tenant_id__in=wanted, name__in={n for names in wanted.values() for n in names}
    ):
        try:
            value = secret.value()
        except vault.Unreadable:
            continue
        forms[secret.tenant_id, secret.name] = hidden_forms(value), cut_forms(value)
    out = {}
    for pk, tenant, names in rows:
        found = [forms[tenant, name] for name in names if (tenant, name) in forms]
        texts = {text for shown, _ in found for text in shown}
        cut = {form for _, pieces in found for form in pieces}
        if texts or cut:
            by_least = defaultdict(set)
            for form, least in cut:
                by_least[least].add(form)
            out[pk] = Hidden(
                sorted(texts, key=lambda t: (-len(t), t)),
                tuple(Cut.of(least, forms) for least, forms in sorted(by_least.items())),
            )
    return out


def hidden_forms(value: str) -> set[str]:
    """The texts that show ``value`` in a log: each of its lines of MASK_MIN_CHARS or more
    characters as written, and the value (also without the spaces or newline at its ends, as
    a pasted token often has) as jobs commonly print it encoded, when it has MASK_MIN_CHARS
    characters besides those."""
    lines = {line.strip() for line in value.splitlines()}
    shown = {line for line in lines if len(line) >= MASK_MIN_CHARS}
    if len(value.strip()) < MASK_MIN_CHARS:
        return shown
    for text in {value, value.strip()}:
        data = text.encode()
        shown |= escaped_forms(text) | base64_forms(data) | hex_forms(data)
    return shown


def cut_forms(value: str) -> set[tuple[str, int]]:
    """The forms of ``value`` that a program may print wrapped across lines, its base64 and
    hex (``base64_forms``, ``hex_forms``), each with the fewest characters a piece of it must
    have to be hidden (BASE64_MIN_CHARS, HEX_MIN_CHARS: 48 bits): those longer than that, so
    that a piece shorter than the whole can be hidden."""
    if len(value.strip()) < MASK_MIN_CHARS:
        return set()
    cut = set()
    for text in {value, value.strip()}:
        data = text.encode()
        for forms, least in ((base64_forms(data), BASE64_MIN_CHARS),
                             (hex_forms(data), HEX_MIN_CHARS)):  # fmt: skip
            cut |= {(form, least) for form in forms if len(form) > least}
    return cut


def escaped_forms(text: str) -> set[str]:
    """``text`` percent-encoded (``quote``, keeping "/" or not, and ``quote_plus``, as a URL's
    query or a form writes it; in upper- or lower-case hex; once, or twice as a URL carried in
    another's query is) and JSON-escaped (``json.dumps`` without its quotes, non-ASCII escaped
    or not), where that differs from it."""
    json_escaped = {json.dumps(text, ensure_ascii=flag)[1:-1] for flag in (True, False)}
    once = with_lower_case({quote(text), quote(text, safe=""), quote_plus(text)} - {text})
    twice = with_lower_case({encode(form) for form in once for encode in QUOTE_ONCE_MORE})
    return (json_escaped | once | twice) - {text}


def with_lower_case(percent_encoded: set[str]) -> set[str]:
    """The forms and each with its escapes in lower-case hex ("%2f" for "%2F")."""
    lower = (PERCENT_ESCAPE.sub(lambda m: m.group().lower(), form) for form in percent_encoded)
    return percent_encoded.union(lower)


def hex_forms(data: bytes) -> set[str]:
    """``data`` in hex, lower- and upper-case (as ``xxd -p`` or ``hexdump`` print it), when that
    has HEX_MIN_CHARS characters or more. Hex is byte-aligned: the same inside a longer hex."""
    if 2 * len(data) < HEX_MIN_CHARS:
        return set()
    return {data.hex(), data.hex().upper()}


def base64_forms(data: bytes) -> set[str]:
    """The base64 that shows ``data``, in the standard and the URL-safe alphabet: its own
    encoding, padded or not, and, for data encoded inside a longer text (``base64("user:" +
    token)``, an HTTP Basic header or a docker config's ``auth``), the characters that hold
    its bits alone in each of the three alignments it can have to the 3-byte groups. Those
    runs shorter than BASE64_MIN_CHARS are left out."""
    forms = set()
    for lead in range(3):  # the data after `lead` bytes of whatever precedes it
        encoded = base64.b64encode(bytes(lead) + data).decode()
        # Character i holds bits 6i to 6i+5 and the data bits 8*lead to 8*(lead+len(data))-1:
        # the characters wholly inside those are the same whatever comes before or after.
        first, end = -(-8 * lead // 6), 8 * (lead + len(data)) // 6
        if end - first >= BASE64_MIN_CHARS:
            forms.add(encoded[first:end])
    if 8 * len(data) // 6 >= BASE64_MIN_CHARS:
        alone = base64.b64encode(data).decode()
        forms |= {alone, alone.rstrip("=")}
    return forms | {form.translate(URL_SAFE) for form in forms}


def mask(text: str, hidden: Hidden) -> str:
    """The text with each of ``hidden.texts`` (longest first) written MASK: a substring search
    of the text for each, which replaces only those it finds; then each piece of a cut form at
    an end of the text (``cut_pieces``)."""
    for secret in hidden.texts:
        if secret in text:
            text = text.replace(secret, MASK)
    for cut in hidden.cut:
        text = cut_pieces(text, cut)
    return text


def cut_pieces(line: str, cut: Cut) -> str:
    """The line with MASK for what it holds of a form wrapped across lines: the whole line when
    it lies inside one of ``cut.forms`` (a line between the first and last of a wrapped form),
    else the end of the line that begins one, and the start of it that ends one, each of
    ``cut.least`` characters or more. Spaces at the line's ends stay. Only lines whose ends'
    ``cut.least`` characters lie inside the forms are searched further."""
    body, least = line.strip(), cut.least
    if len(body) < least:
        return line
    tail, head = body[-least:] in cut.joined, body[:least] in cut.joined
    if not (tail or head):
        return line
    lead, trail = line[: len(line) - len(line.lstrip())], line[len(line.rstrip()) :]
    for form in cut.forms:
        if tail and head and body in form:
            return lead + MASK + trail
        if tail and (start := piece_start(body, form, least)) is not None:
            body, tail = body[:start] + MASK, False
        if head and (end := piece_end(body, form, least)):
            body, head = MASK + body[end:], False
    return lead + body + trail


def piece_start(body: str, form: str, least: int) -> int | None:
    """Where the longest end of ``body`` that begins ``form`` starts, if it has ``least``
    characters or more."""
    key = form[:least]
    at = body.find(key, max(0, len(body) - len(form)))
    while at != -1:
        if form.startswith(body[at:]):
            return at
        at = body.find(key, at + 1)
    return None


def piece_end(body: str, form: str, least: int) -> int:
    """The length of the longest start of ``body`` that ends ``form``, if it has ``least``
    characters or more, else 0."""
    key, end = form[-least:], 0
    at = body.find(key, 0, len(form))
    while at != -1:
        if form.endswith(body[: at + least]):
            end = at + least
        at = body.find(key, at + 1, len(form))
    return end
