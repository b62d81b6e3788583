"""Keeping tenants' secrets out of the logs of the jobs that name them, as GitHub Actions hides
its secrets: a job that prints its token, or an HTTP Basic header made of it, does not show it
to every reader of the log.

Each value's lines of ``MASK_MIN_CHARS`` or more characters, and the value as jobs commonly
print it encoded (base64, hex, percent-encoded once or twice, JSON-escaped: ``hidden_forms``),
are written ``***`` in the logs of the jobs that name it (``masks``, ``mask``), as the agents'
API stores them. Base64 and hex that a program wraps across lines (``base64`` at 76 columns,
PEM at 64, ``xxd -p`` at 60) are hidden piece by piece (``cut_forms``, ``cut_pieces``), and so
are the lines of a hex dump (``xxd``, ``hexdump -C``, ``od -t x1z``) whose bytes hold the value
or a piece of it, text column and all (``dumped``).
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

from quotas import vault
from quotas.models import TenantSecret

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


# A line of a hex dump: an offset, then the bytes in hex, grouped, then (mostly) the same bytes
# as text, non-printing ones as ".": xxd's "00000010: 696a 6b6c ...  ijkl..." (any -g, -c,
# -u), hexdump -C's "00000010  69 6a 6b 6c ...  |ijkl...|", od -A x -t x1z's
# "000010 69 6a 6b 6c ...  >ijkl...<".
DUMP_LINES = (
    re.compile(r"(?P<offset>[0-9a-fA-F]{6,16}: )(?P<hex>[0-9a-fA-F]{2,}(?: [0-9a-fA-F]{2,})*)"
               r"(?:  .*)?"),  # xxd: one space between groups, two before the text
    re.compile(r"(?P<offset>[0-9a-fA-F]{6,16}  )(?P<hex>[0-9a-fA-F]{2}(?:  ?[0-9a-fA-F]{2})*)"
               r"(?: +\|.*\|)?"),  # hexdump -C
    re.compile(r"(?P<offset>[0-9a-fA-F]{6,16} )(?P<hex>[0-9a-fA-F]{2}(?: [0-9a-fA-F]{2})*)"
               r"(?: +>.*<)?"),  # od -t x1z
)  # fmt: skip


# What every dump's line starts with: one look at a line that is no dump's.
DUMP_START = re.compile(r"[0-9a-fA-F]{6,16}[: ]")


def dumped(line: str) -> tuple[str, bytes] | None:
    """The offset and the bytes of a hex dump's line, None for any other line."""
    if not DUMP_START.match(line):
        return None
    for shape in DUMP_LINES:
        if found := shape.fullmatch(line):
            digits = found["hex"].replace(" ", "")
            if len(digits) % 2 == 0:
                return found["offset"], bytes.fromhex(digits)
    return None


def mask(text: str, hidden: Hidden) -> str:
    """The text with each of ``hidden.texts`` (longest first) written MASK: a substring search
    of the text for each, which replaces only those it finds; then each piece of a cut form at
    an end of the text (``cut_pieces``). A line of a hex dump (``dumped``) whose bytes hold the
    value, or a piece of it at their ends, is written MASK after its offset, its text column
    with it (it prints those bytes as they are)."""
    if (dump := dumped(text)) is not None:
        offset, data = dump
        if masked(data.hex(), hidden) != data.hex():
            return offset + MASK
    return masked(text, hidden)


def masked(text: str, hidden: Hidden) -> str:
    """``mask`` of a text read as it is (no hex dump's line taken apart)."""
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
