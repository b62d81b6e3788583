"""The portal's forms: the submit form's fields as typed, and the SubmitSerializer input they
make; the job page's dependencies, and the DependenciesSerializer input they make; and every
form's errors tied to their fields for screen readers (`described`).

Every rule stays in the serializers, as for the API. This module only turns the forms' strings
(a command line, KEY=VALUE lines, comma-separated lists, exit codes with runs of them (128-255),
dependencies as Slurm writes them, data volumes as NAME:PATH[:rw] lines, begin and deadline
times in UTC without their zone) into the shapes the serializers read, and their nested errors
back into one line per field.
"""

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.safestring import SafeString

from jobs.cli import dependencies_written
from jobs.cli.written import (
    WRITES,
    exit_codes_in,
    exit_codes_said,
    mount_written,
    names_in,
    slurm_form,
)
from quotas.models import PriorityClass

# Inputs and selects, stripped; textareas are kept as typed, so a value may end in spaces.
FIELDS = ["tenant", "name", "family", "image", "command", "cpu_milli", "memory_mb", "gpus",
          "gpu_milli", "gpu_types", "first_type_wait_s", "exclude_nodes", "only_nodes",
          "features", "exclusive", "secrets", "workers",
          "min_workers", "topology", "shards",
          "max_running_shards", "priority_class", "priority",
          "preemptible", "max_runtime_s", "max_retries", "retry_user_errors",
          "retry_exit_codes", "notify_start", "notify_requeue", "notify_time_limit",
          "notify_email", "depends_on", "begin", "deadline", "form_key"]  # fmt: skip
PAIRS = ["env", "cluster_selector", "labels"]  # KEY=VALUE a line
NAMES = ["gpu_types", "exclude_nodes", "only_nodes", "features", "secrets"]  # comma-separated names
TEXTAREAS = [*PAIRS, "volumes"]
BOXES = ["exclusive", "retry_user_errors", "notify_start", "notify_requeue",
         "notify_time_limit", "notify_email"]  # fmt: skip
FORM_KEY = re.compile(r"[0-9a-f]{1,32}")

INITIAL = {"family": "training", "cpu_milli": 1000, "memory_mb": 4096, "gpus": 1,
           "gpu_milli": 0, "workers": 1, "shards": 1, "priority_class": "", "priority": 0,
           "preemptible": "", "max_runtime_s": 3600, "max_retries": 3}  # fmt: skip


def read(post) -> dict[str, str]:
    """The form's fields as the user gave them: to check, and to show again after an error."""
    values = {field: post.get(field, "").strip() for field in FIELDS}
    return values | {field: post.get(field, "") for field in TEXTAREAS}


def serializer_input(values: dict[str, str]) -> tuple[dict, dict[str, str]]:
    """SubmitSerializer's input, and the errors of fields too malformed to hand it.

    A blank field is left out, as an API client leaves it out, so the serializer's default
    applies: "family default" for preemptible, no for an unchecked retry_user_errors or
    notify_start.
    """
    data = {field: value for field, value in values.items() if value != ""}
    data.pop("form_key", None)
    if key := idempotency_key(values):
        data["idempotency_key"] = key
    errors = {}
    try:
        # A textarea's line breaks come as CRLF: a script inside quotes keeps them as LF.
        data["command"] = shlex.split(values["command"].replace("\r\n", "\n"))
    except ValueError as error:  # an unclosed quote
        data["command"], errors["command"] = [], f"Cannot split the command: {error}."
    for field in PAIRS:
        try:
            data[field] = parse_pairs(values[field])
        except ValueError as error:
            data[field], errors[field] = {}, str(error)
    try:
        data["volumes"] = parse_mounts(values["volumes"])
    except ValueError as error:
        data["volumes"], errors["volumes"] = [], str(error)
    for field in NAMES:
        data[field] = names_in(values[field])
    try:
        data["retry_exit_codes"] = exit_codes_in(values["retry_exit_codes"])
    except ValueError as error:
        data["retry_exit_codes"], errors["retry_exit_codes"] = [], str(error)
    # As the command line takes them: "#12, 13, afterany:14, singleton"; what is no id goes on
    # as typed, for the serializer to name.
    data["depends_on"], singleton = dependencies_written(values["depends_on"])
    if singleton:
        data["singleton"] = True
    for field in ("begin", "deadline"):
        if values[field]:
            data[field] = as_utc(values[field])
    return data, errors


def typed(spec: dict, now: datetime) -> dict[str, str]:
    """A submission's spec (serializers.submission_of) as the form's fields hold it, the way
    a person types them: the inverse of serializer_input. A begin or deadline already past is
    left out, as it would defer nothing or refuse the copy."""
    values = {field: "" if spec.get(field) is None else str(spec[field]) for field in FIELDS}
    values["command"] = shlex.join(spec["command"])
    for field in PAIRS:
        values[field] = "".join(f"{key}={value}\n" for key, value in spec[field].items())
    values["volumes"] = "".join(mount_typed(mount) + "\n" for mount in spec["volumes"])
    for field in NAMES:
        values[field] = ", ".join(spec[field])
    values["retry_exit_codes"] = exit_codes_said(spec["retry_exit_codes"])
    waits = spec["depends_on"] or spec["singleton"]
    values["depends_on"] = slurm_form(spec["depends_on"], spec["singleton"]) if waits else ""
    values["preemptible"] = "true" if spec["preemptible"] else "false"  # a choice of a select
    for box in BOXES:
        values[box] = "true" if spec[box] else ""
    for field in ("begin", "deadline"):
        moment = spec[field]
        values[field] = (
            moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M") if moment and moment > now else ""
        )
    return values


def mount_typed(mount: dict) -> str:
    return f"{mount['name']}:{mount['path']}{'' if mount['read_only'] else WRITES}"


def as_utc(text: str) -> str:
    """A time field's text (begin, deadline) as the serializer takes it. A browser's
    datetime-local input sends a time without a zone ("2026-12-03T02:00"), which the form says
    is UTC; a time with a zone goes on as written, and so does what is no time, for the
    serializer to name."""
    try:
        moment = parse_datetime(text)
    except ValueError:  # well formed, yet no time (a 13th month)
        return text
    if moment is None or moment.tzinfo is not None:
        return text
    return moment.replace(tzinfo=UTC).isoformat()


def idempotency_key(values: dict[str, str]) -> str | None:
    """The submission's idempotency key: the form drawn (its `form_key`, one per page) and all
    it holds. The same form sent twice (a double click, a reload) queues one job; the page
    changed and sent again (after Back) is another submission. None without a form key."""
    if not FORM_KEY.fullmatch(values.get("form_key", "")):
        return None
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()
    return f"portal-{values['form_key']}-{digest[:32]}"


def dependencies_input(text: str) -> dict:
    """DependenciesSerializer's input from the job page's field, written as the command line's
    `depend` takes it ("afterok:12:13,afterany:14,singleton"; "none", or nothing, for none)."""
    depends_on, singleton = dependencies_written(text)
    return {"depends_on": depends_on, "singleton": singleton}


def form_field(name: str) -> str:
    """The submit form's field a serializer's field is typed in: singleton is a word of the
    dependencies, depends_on."""
    return "depends_on" if name == "singleton" else name


def refusal_text(detail) -> str:
    """A serializer's refusal as one line, each field's errors in turn (the fields' names left
    out: the messages name what they are about)."""
    if isinstance(detail, dict):
        return " ".join(error_text(inner) for inner in detail.values())
    return error_text(detail)


def parse_pairs(text: str) -> dict[str, str]:
    """KEY=VALUE lines to a dict; blank lines are skipped.

    The value is everything after the first '=', kept verbatim (spaces and further '=' too).
    Only line breaks split: browsers send a textarea's as CRLF.
    """
    pairs = {}
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if not line.strip():
            continue
        key, equals, value = line.partition("=")
        if not equals:
            raise ValueError(f"Line {number} has no '=': write one KEY=VALUE a line.")
        if key in pairs:
            raise ValueError(f"Line {number} gives {key!r} a second time.")
        pairs[key] = value
    return pairs


def parse_mounts(text: str) -> list[dict]:
    """NAME:PATH or NAME:PATH:rw lines (as the command line's --volume takes them) to the
    API's volumes; blank lines are skipped."""
    mounts = []
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            mounts.append(mount_written(line))
        except ValueError:
            raise ValueError(
                f"Line {number} is not NAME:PATH or NAME:PATH:rw: write one volume a line."
            ) from None
    return mounts


def error_text(detail) -> str:
    """A field's serializer errors as one line. A dict or list field's errors come keyed by the
    entry at fault (a name, or an index from 0); they are named so the user can find it."""
    if isinstance(detail, dict):
        return " ".join(f"{label(key)}: {error_text(inner)}" for key, inner in detail.items())
    if isinstance(detail, list):
        return " ".join(error_text(inner) for inner in detail)
    return str(detail)


def label(key) -> str:
    return f"item {key + 1}" if isinstance(key, int) else repr(key)


def default_said(tenants) -> str:
    """The submit form's choice of no class, said: "its team's default", with its name where
    every one of `tenants` has the same ("its team's default (normal)")."""
    names = {t.default_priority_class.name if t.default_priority_class else "normal"
             for t in tenants.select_related("default_priority_class")}  # fmt: skip
    return "its team's default" + (f" ({names.pop()})" if len(names) == 1 else "")


def open_classes(tenants) -> list[PriorityClass]:
    """The priority classes open to at least one of `tenants`: the ones worth offering."""
    tenants = list(tenants)
    classes = PriorityClass.objects.prefetch_related("tenants")
    return [c for c in classes if any(c.open_to(t) for t in tenants)]


@dataclass(frozen=True)
class Field:
    """A form field's error as assistive technology reads it: the element of id `message_id`
    holds its `message`, and its control, given `attrs`, says it is invalid and is described by
    that element (after its help text's, `help_id`)."""

    name: str
    message: str = ""
    message_id: str = ""
    help_id: str = ""

    @property
    def attrs(self) -> SafeString:
        """The control's aria-invalid and aria-describedby attributes, each after a space."""
        ids = " ".join(filter(None, [self.help_id, self.message_id if self.message else ""]))
        if not ids:
            return SafeString("")
        invalid = ' aria-invalid="true"' if self.message else ""
        return format_html('{} aria-describedby="{}"', SafeString(invalid), ids)


def described(
    errors: dict[str, str], *, message_id: str = "", helps: dict[str, str] | None = None
) -> dict[str, Field]:
    """A form's fields that have an error (one message each, `errors`) or a help text (the id
    of its element, `helps`), by name; the templates draw the controls' `attrs` and the
    messages (portal/field_error.html) from them. Each message is in an element of its own,
    `id_<name>_error` as Django's forms name it (the password form's), or, given a
    `message_id`, in that one element, which holds the form's only message (the job page's)."""
    helps = helps or {}
    names = [*errors, *(name for name in helps if name not in errors)]
    return {
        name: Field(
            name,
            errors.get(name, ""),
            message_id or f"id_{name}_error",
            helps.get(name, ""),
        )
        for name in names
    }
