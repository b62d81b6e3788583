"""A secret's value hidden in the logs of the jobs that name it as they commonly print it
encoded: base64 (alone, or inside a longer text such as an HTTP Basic header), hex,
percent-encoded (in either case, once or twice) and JSON-escaped; base64 and hex wrapped across
lines, piece by piece; while text that only resembles it is left as printed."""

import base64
import json
import subprocess
from urllib.parse import quote, quote_plus

import pytest

from jobs import cycle
from jobs.models import LogChunk
from quotas import secret_masking, tenant_secrets
from tests.factories import JobFactory, NodeFactory

pytestmark = pytest.mark.django_db
TOKEN = "hf_abcdefghijklmnop"
URL_UNSAFE = "hf_ab?cd>ef~gh?ij"  # its base64 has "/" and "+", the URL-safe one "_" and "-"
PASSWORD = "p@ss w/rd:1&2"
QUOTED = 'pa"ss\\wo\nrd'


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def attempt(east, alpha):
    """The attempt of a job of alpha naming its secret HF_TOKEN, placed on east."""
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    tenant_secrets.put(alpha, "HF_TOKEN", "placeholder")
    job = JobFactory(tenant=alpha, gpus=1, secrets=["HF_TOKEN"])
    cycle.run_cycle()
    return job.attempts.get()


@pytest.mark.parametrize(
    ("value", "printed", "want"),
    [
        # base64 alone, padded or not
        (TOKEN, f"echo {b64(TOKEN)}", "echo ***"),
        (TOKEN, f"HF_TOKEN_B64={b64(TOKEN).rstrip('=')};", "HF_TOKEN_B64=***;"),
        # inside an HTTP Basic header or a docker config's auth, in each of the three alignments:
        # what shows is the user's part and the last character, which holds others' bits too
        (TOKEN, f"Authorization: Basic {b64('user:' + TOKEN)}", "Authorization: Basic dXNlcjp***"),
        (TOKEN, f'"auth": "{b64("alice:" + TOKEN)}"', '"auth": "YWxpY2U6***"'),
        (TOKEN, f'"auth": "{b64("bob:" + TOKEN)}"', '"auth": "Ym9iOm***A="'),
        # URL-safe base64, as JWTs and URLs carry it
        (URL_UNSAFE, base64.urlsafe_b64encode(URL_UNSAFE.encode()).decode(), "***"),
        (URL_UNSAFE, f"?state={b64(URL_UNSAFE)}", "?state=***"),
        # percent-encoded, as quote and quote_plus write it
        (PASSWORD, f"https://u:{quote_plus(PASSWORD)}@db/", "https://u:***@db/"),
        (PASSWORD, f"GET /login/{quote(PASSWORD)}", "GET /login/***"),
        (PASSWORD, f"GET /login?p={quote(PASSWORD, safe='')}", "GET /login?p=***"),
        # in lower-case hex, as some clients write it, and twice, as a URL inside another's query
        (PASSWORD, f"GET /login/{quote(PASSWORD).lower()}", "GET /login/***"),
        (PASSWORD, f"?next={quote(quote_plus(PASSWORD), safe='')}", "?next=***"),
        (PASSWORD, f"?next={quote_plus(quote(PASSWORD, safe='')).lower()}", "?next=***"),
        # hex, in either case, alone or inside a longer dump
        (TOKEN, f"key={TOKEN.encode().hex()}", "key=***"),
        (TOKEN, f"00FF{TOKEN.encode().hex().upper()}0A", "00FF***0A"),
        # JSON-escaped: a quote, a backslash and a newline
        (QUOTED, json.dumps({"password": QUOTED}), '{"password": "***"}'),
        (TOKEN + "\n", json.dumps({"token": TOKEN + "\n"}), '{"token": "***"}'),
        # a 5-character value: hidden percent-encoded, but its base64 is too short to hide
        ("a b/c", f"{quote_plus('a b/c')} {b64('a b/c')}", f"*** {b64('a b/c')}"),
        # text that only resembles the value's base64 (its first 6 characters') is left
        (TOKEN, f"{b64(TOKEN)} {b64('hf_abc')} {b64('user:')}", "*** aGZfYWJj dXNlcjo="),
        # a 5-byte value's hex (10 characters: 40 bits) is left, as its base64 is
        ("ab cd", "61622063643f", "61622063643f"),
    ],
)  # fmt: skip
def test_it_hides_a_value_printed_encoded(alpha, attempt, value, printed, want):
    tenant_secrets.put(alpha, "HF_TOKEN", value)

    (hidden,) = secret_masking.masks([attempt.pk]).values()

    assert secret_masking.mask(printed, hidden) == want


def test_it_hides_a_basic_header_in_the_stored_log(agent, alpha, attempt):
    tenant_secrets.put(alpha, "HF_TOKEN", TOKEN)
    header = f"Authorization: Basic {b64('user:' + TOKEN)}"
    line = {"attempt_id": attempt.pk, "rank": 0, "seq": 0, "stream": "stdout", "text": header}

    agent.post("/api/v1/agent/east/logs/", {"lines": [line]}, format="json")

    assert LogChunk.objects.get(attempt=attempt).text == "Authorization: Basic dXNlcjp***"


LONG = "sk-" + "".join(chr(ord("a") + n * 7 % 26) for n in range(77))  # 80 bytes
CONFIG = f'{{"user": "alice", "token": "{LONG}", "region": "eu-west-1", "retries": 3}}'


def lines_of(text: str, width: int) -> list[str]:
    return [text[at : at + width] for at in range(0, len(text), width)]


def test_it_hides_base64_wrapped_across_lines_piece_by_piece(alpha, attempt):
    """`base64` wraps at 76 columns, PEM at 64: each line holding the value's bits alone is
    hidden, wholly or where the value starts or ends in it; the rest of the text stays."""
    tenant_secrets.put(alpha, "HF_TOKEN", LONG)
    (hidden,) = secret_masking.masks([attempt.pk]).values()
    alone = base64.encodebytes(LONG.encode()).decode().splitlines()
    inside = b64(CONFIG)  # the token is bytes 28-107: characters 38-143 hold its bits alone

    assert [secret_masking.mask(line, hidden) for line in alone] == ["***", "***"]
    assert [secret_masking.mask(line, hidden) for line in lines_of(inside, 64)] == [
        inside[:38] + "***",
        "***",
        "***" + inside[144:192],
        inside[192:],
    ]


def test_it_hides_hex_wrapped_across_lines(alpha, attempt):
    """`xxd -p` prints 60 hex characters a line: the value's bytes 5-84 of a dump."""
    tenant_secrets.put(alpha, "HF_TOKEN", LONG)
    (hidden,) = secret_masking.masks([attempt.pk]).values()
    dump = (b"head:" + LONG.encode() + b":tail").hex()

    assert [secret_masking.mask(line, hidden) for line in lines_of(dump, 60)] == [
        dump[:10] + "***",
        "***",
        "***" + dump[170:180],
    ]


DUMPERS = [["xxd"], ["xxd", "-g1", "-u"], ["xxd", "-c", "32"], ["hexdump", "-C"],
           ["od", "-A", "x", "-t", "x1z"]]  # fmt: skip


def dump_of(data: bytes, dumper: list[str], tmp_path) -> list[str]:
    """The lines the tool prints of a file holding ``data``, as a job would print them."""
    path = tmp_path / "token"
    path.write_bytes(data)
    return subprocess.run(
        [*dumper, str(path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()


@pytest.mark.parametrize("dumper", DUMPERS, ids=" ".join)
def test_it_hides_the_lines_of_a_hex_dump_that_hold_the_value_text_column_and_all(
    alpha, attempt, dumper, tmp_path
):
    tenant_secrets.put(alpha, "HF_TOKEN", LONG)
    (hidden,) = secret_masking.masks([attempt.pk]).values()
    data = b"head:" + LONG.encode() + b":tail-and-more-bytes-after-it\n"  # the value: bytes 5-84
    lines = dump_of(data, dumper, tmp_path)

    shown = [secret_masking.mask(line, hidden) for line in lines]

    # Lines holding 6 bytes or more of the value (bytes 5-84); the last holds 5 (0x50-0x54),
    # fewer than a piece must have, and shows them.
    width = 32 if "32" in dumper else 16
    holding = {n for n in range(len(lines)) if min(85, (n + 1) * width) - max(5, n * width) >= 6}
    for n, (line, said) in enumerate(zip(lines, shown, strict=True)):
        if n in holding:
            assert said.endswith("***") and LONG[:4] not in said, (line, said)
            assert said == line[: len(said) - 3] + "***"  # its offset stays
        else:
            assert said == line  # the tail's lines, and the dump's last offset
    assert not any(piece in "\n".join(shown) for piece in lines_of(LONG, 8))


def test_a_dump_of_other_bytes_is_left_as_it_is(alpha, attempt, tmp_path):
    tenant_secrets.put(alpha, "HF_TOKEN", LONG)
    (hidden,) = secret_masking.masks([attempt.pk]).values()
    lines = dump_of(CONFIG.replace(LONG, "x" * 80).encode(), ["xxd"], tmp_path)

    assert [secret_masking.mask(line, hidden) for line in lines] == lines


def test_it_leaves_pieces_shorter_than_the_minimum_and_unrelated_base64(alpha, attempt):
    tenant_secrets.put(alpha, "HF_TOKEN", LONG)
    (hidden,) = secret_masking.masks([attempt.pk]).values()
    encoded = b64(LONG)
    other = base64.encodebytes(CONFIG.replace(LONG, "x" * 80).encode()).decode().splitlines()
    # the value's base64 begins at the line's end with 7 characters, and ends its start with 7
    short = [f"blob {encoded[:7]}", f"{encoded[-9:-2]} blob"]

    assert [secret_masking.mask(line, hidden) for line in other + short] == other + short


def test_it_hides_wrapped_base64_posted_a_line_at_a_time(agent, alpha, attempt):
    """Each line is hidden on its own: the pieces of one value may come in separate posts."""
    tenant_secrets.put(alpha, "HF_TOKEN", LONG)
    indented = [f"    {line}" for line in lines_of(b64(CONFIG), 64)]
    for seq, text in enumerate(indented):
        line = {"attempt_id": attempt.pk, "rank": 0, "seq": seq, "stream": "stdout", "text": text}
        agent.post("/api/v1/agent/east/logs/", {"lines": [line]}, format="json")

    stored = list(LogChunk.objects.filter(attempt=attempt).order_by("seq").values_list("text"))

    assert [text for (text,) in stored][1:3] == ["    ***", "    ***" + indented[2][4 + 16 :]]


def test_a_base64_run_shorter_than_the_minimum_is_not_a_mask():
    six_bytes = secret_masking.base64_forms(b"abcdef")
    five_bytes = secret_masking.base64_forms(b"abcde")

    assert six_bytes == {"YWJjZGVm"}  # aligned only: its other alignments have 7 characters
    assert five_bytes == set()
