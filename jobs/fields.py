"""The fields a submission is read with, and their limits: text that PostgreSQL can store, an
environment a worker can start with, dependencies, times with their zone (begin, deadline)."""

import difflib
import re
from datetime import UTC, datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from jobs.cli.written import seconds_from_now
from jobs.dependencies import Wait
from jobs.models import Dependency
from quotas import tenant_volumes

# Kubernetes' rule for environment variable names, so a job runs on any backend.
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]{0,255}")


def validate_env_names(env: dict) -> None:
    bad = sorted(name for name in env if not ENV_NAME.fullmatch(name))
    if bad:
        raise serializers.ValidationError(
            f"{bad[0][:80]!r} is not an environment variable name"
            " (letters, digits, '-', '.', '_'; not a leading digit)."
        )


# What no text field can hold: a NUL (PostgreSQL refuses it) or a lone surrogate (UTF-8 cannot
# encode one, so neither the database nor a JSON answer can).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class Choice(serializers.ChoiceField):
    """DRF's ChoiceField, its refusal quoting the value escaped, as Python writes it, cut to 80
    characters, and listing the choices: DRF's own quotes the value raw, and an answer quoting a
    lone surrogate cannot be encoded (a 500), nor should one quote 70,000 characters back."""

    def __init__(self, choices, **kwargs):
        super().__init__(choices, **kwargs)
        listed = ", ".join(str(value) for value in self.choices)
        self.error_messages["invalid_choice"] = f"{{input!r:.80}} is not one of: {listed}."


class StrictFields:
    """A serializer refusing a field it has not, on that field, with the one meant where one
    is close ("Did you mean 'max_running_shards'?"), rather than leaving it out unsaid: a job
    file's misspelled `max_running_shard` would run every shard at once, and a cancel's
    misspelled `stat` would cancel every state (as Kubernetes' strict field validation
    refuses one)."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            refuse_unknown(data, self.fields)
        return super().to_internal_value(data)


def body_of(request, *known: str) -> dict:
    """The body of a call that reads its fields one by one (a team's members, a pause, a
    secret) or takes none (a cancel, a hold): a JSON object of the fields `known` ({}: nothing
    sent); a 400 for any other body (`non_field_errors`, as a serializer says it), for a
    field not among `known`, as StrictFields refuses one (a misspelled or misplaced field is
    never left out unsaid: a cancel of a batch's `shards` would cancel every shard), and for
    text no field can store (UNSTORABLE)."""
    data = request.data
    if not data:
        return {}
    if not isinstance(data, dict):
        raise serializers.ValidationError(
            {"non_field_errors": ["Send the fields as a JSON object."]}
        )
    refuse_unknown(data, known)
    if unstorable := [key for key, value in data.items()
                      if isinstance(value, str) and UNSTORABLE.search(value)]:  # fmt: skip
        raise serializers.ValidationError(
            {key: ["Cannot hold a NUL character or a lone surrogate."] for key in unstorable}
        )
    return data


def refuse_unknown(data: dict, known) -> None:
    """A 400 naming each key of `data` that is not one of `known`, with the one meant."""
    if unknown := [key for key in data if key not in known]:
        raise serializers.ValidationError(
            {field_named(key): [unknown_field(key, known)] for key in unknown}
        )


def unknown_field(key: str, known) -> str:
    """Why `key` is refused: no such field, and the one meant where one is close."""
    close = difflib.get_close_matches(str(key), list(known), n=1)
    meant = f" Did you mean {close[0]!r}?" if close else ""
    return f"There is no field {str(key)[:100]!r} here.{meant}"


def field_named(key) -> str:
    """A key sent as a field, as a refusal can name it: a NUL or a lone surrogate escaped
    (no JSON answer can hold one), cut to 100 characters."""
    key = str(key)
    return (ascii(key)[1:-1] if UNSTORABLE.search(key) else key)[:100]


class TextKeys(serializers.DictField):
    """DRF's DictField, refusing first a key that holds a NUL or a lone surrogate: DRF files a
    value's error under its key, and an answer quoting a lone surrogate cannot be encoded."""

    default_error_messages = {"bad_key": "A key cannot hold a NUL or a lone surrogate."}

    def to_internal_value(self, data):
        if isinstance(data, dict) and any(UNSTORABLE.search(str(key)) for key in data):
            self.fail("bad_key")
        return super().to_internal_value(data)


# A worker's command line and environment together must fit the kernel's limit for a new
# program (128 KiB per string, a few MiB in all); every shard stores its own copy.
MAX_COMMAND_CHARS = 128 * 1024


MAX_ENV_CHARS = 128 * 1024


# A batch's shards store the command and environment once each: one request may not write more
# than this in all (10,000 shards of 6.5 KiB; a single job is never near it).
MAX_BATCH_SPEC_CHARS = 64 * 1024 * 1024


MAX_SHARDS = 10_000  # of a batch


MAX_LABELS, MAX_LABEL_VALUE = 32, 256  # a job's own labels, and each one's value in characters


def at_most(limit: int, what: str):
    """A validator refusing more than `limit` entries."""

    def check(value) -> None:
        if len(value) > limit:
            raise serializers.ValidationError(f"At most {limit} {what}.")

    return check


def within(limit: int, what: str):
    def validate(value) -> None:
        strings = [*value, *value.values()] if isinstance(value, dict) else value
        if sum(len(text) for text in strings) > limit:
            raise serializers.ValidationError(f"The {what} is over {limit // 1024} KiB in all.")

    return validate


class DependencyItem(serializers.Field):
    """One item of depends_on: a job id, to wait for it to succeed (afterok), or an object
    `{"id": 12, "kind": "afterany"}` (kind: afterok, the default, afterany or afternotok)."""

    SHAPE = 'A job id, or {"id": <job id>, "kind": "afterok" | "afterany" | "afternotok"}.'
    ids = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    kinds = serializers.ChoiceField(
        choices=Dependency.Kind.choices,
        error_messages={"invalid_choice": "{input!r} is no dependency kind: afterok, afterany or "
                        "afternotok."},
    )  # fmt: skip

    def to_internal_value(self, data) -> Wait:
        if isinstance(data, dict):
            if set(data) - {"id", "kind"} or "id" not in data:
                raise serializers.ValidationError(self.SHAPE)
            kind = data.get("kind", Dependency.Kind.AFTEROK)
            return Wait(self.ids.run_validation(data["id"]), self.kinds.run_validation(kind))
        if isinstance(data, (list, bool)):
            raise serializers.ValidationError(self.SHAPE)
        return Wait(self.ids.run_validation(data), Dependency.Kind.AFTEROK)

    def to_representation(self, value: Wait) -> dict:
        return {"id": value.on, "kind": value.kind}


MAX_BEGIN_AHEAD = timedelta(days=366)
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


MAX_RUNTIME = timedelta(days=30)  # a job's max_runtime_s at most


# A job deferred by a year at most, and running 30 days at most, ends by then.
MAX_DEADLINE_AHEAD = MAX_BEGIN_AHEAD + MAX_RUNTIME


class ZonedTime(serializers.Field):
    """An ISO 8601 time with its zone, or one from now by this server's clock ("now+2h",
    "now-1d": jobs.cli.written.RELATIVE), at most `ahead` from now; `read` says what it means.
    A time without a zone is refused rather than read in some zone: the caller's and the
    server's may differ."""

    ahead: timedelta
    default_error_messages = {
        "invalid": "A time with its zone, as ISO 8601 writes it: 2026-12-03T02:00:00Z for UTC, "
        "or 2026-12-03T03:00:00+01:00; or from now, now+2h, now-1d (s, m, h, d).",
        "naive": "No time zone: UTC is expected, written with a Z (2026-12-03T02:00:00Z), or "
        "give the zone's offset (+01:00).",
    }

    def to_internal_value(self, data) -> datetime | None:
        value = data if isinstance(data, datetime) else self.parse(data)
        if value.tzinfo is None:
            self.fail("naive")
        now = timezone.now()
        if value - now > self.ahead:
            self.fail("too_far")
        return self.read(value, now)

    def read(self, value: datetime, now: datetime) -> datetime | None:
        raise NotImplementedError

    def parse(self, data) -> datetime:
        # Not quoted back: the text may hold a lone surrogate, which no answer can encode.
        if not isinstance(data, str) or len(data) > 64:
            self.fail("invalid")
        if (ahead := seconds_from_now(data.strip())) is not None:
            try:
                return timezone.now() + timedelta(seconds=ahead)
            except OverflowError:  # past the year 9999, or before the year 1
                self.fail("invalid")
        try:
            value = parse_datetime(data.strip())
        except ValueError:  # well formed, yet no time (a 13th month)
            value = None
        if value is None:
            self.fail("invalid")
        return value

    def to_representation(self, value) -> str:
        return serializers.DateTimeField().to_representation(value)


class Moment(ZonedTime):
    """A time a list asks about, as UTC, past or to come: ISO 8601 with its zone, or a day,
    YYYY-MM-DD, from its 00:00 UTC (as the usage report's days are)."""

    ahead = timedelta(days=3660)
    default_error_messages = {
        "invalid": "A time with its zone, as ISO 8601 writes it (2026-12-03T02:00:00Z for "
        "UTC, or 2026-12-03T03:00:00+01:00), a day, 2026-12-03, from 00:00 UTC, or a time from "
        "now, now-1d (s, m, h, d).",
        "too_far": "More than ten years ahead.",
    }

    def to_internal_value(self, data) -> datetime | None:
        if isinstance(data, str) and DAY.fullmatch(data.strip()):
            try:
                data = datetime.fromisoformat(data.strip()).replace(tzinfo=UTC)
            except ValueError:  # well formed, yet no day (a 13th month)
                self.fail("invalid")
        return super().to_internal_value(data)

    def read(self, value: datetime, now: datetime) -> datetime:
        return value.astimezone(UTC)


class Begin(ZonedTime):
    """A deferred start (Slurm's --begin), as UTC, or None when it is not ahead (a time past,
    or now, defers nothing)."""

    ahead = MAX_BEGIN_AHEAD
    default_error_messages = {
        "too_far": "More than 366 days ahead: a start may be deferred by a year at most.",
    }

    def read(self, value: datetime, now: datetime) -> datetime | None:
        return value.astimezone(UTC) if value > now else None


class Deadline(ZonedTime):
    """A deadline (Slurm's --deadline), as UTC: a time to come. Whether the job could end by
    it is the submission's to say (deadline_problem): it reads the runtime limit and begin."""

    ahead = MAX_DEADLINE_AHEAD
    default_error_messages = {
        "too_far": f"More than {MAX_DEADLINE_AHEAD.days} days ahead: a job deferred by a year "
        f"at most (begin) and running {MAX_RUNTIME.days} days at most ends well before.",
        "past": "Not after now: the job could never end by then.",
    }

    def read(self, value: datetime, now: datetime) -> datetime:
        if value <= now:
            self.fail("past")
        return value.astimezone(UTC)


def deadline_problem(data: dict) -> str:
    """Why the job could never end by its deadline, "" if it could: it would, started now (or
    at its begin) and running its whole runtime limit, end no earlier."""
    deadline, begin = data["deadline"], data["begin"]
    if deadline is None:
        return ""
    start = begin or timezone.now()
    end = start + timedelta(seconds=data["max_runtime_s"])
    if deadline > end:
        return ""
    started = "at its begin" if begin else "now"
    when = serializers.DateTimeField().to_representation(end.replace(microsecond=0))
    return (
        f"Not after {when}, when the job would end if it started {started} and ran its "
        f"max_runtime_s ({data['max_runtime_s']} s): it could not end by then. Give a later "
        "deadline, or none."
    )


class VolumeMount(serializers.Serializer):
    """One of its tenant's data volumes a job mounts: the volume, the path its workers see it
    at, and whether they only read it (the default)."""

    name = serializers.CharField(max_length=63)
    path = serializers.CharField(max_length=1024, trim_whitespace=False)
    read_only = serializers.BooleanField(default=True)

    def validate_path(self, path: str) -> str:
        if problem := tenant_volumes.path_problem(path):
            raise serializers.ValidationError(problem)
        return path


def volumes_field(**options) -> serializers.ListField:
    """A job's data volumes, as a submission takes them."""
    return serializers.ListField(
        child=VolumeMount(), max_length=tenant_volumes.MAX_VOLUMES_PER_JOB, **options
    )
