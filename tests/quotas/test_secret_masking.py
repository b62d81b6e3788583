"""A secret's value hidden in the logs of the jobs that name it as they commonly print it
encoded: base64 (alone, or inside a longer text such as an HTTP Basic header), percent-encoded
and JSON-escaped; while text that only resembles it is left as printed."""

import base64
import json
from urllib.parse import quote, quote_plus

import pytest

from jobs import cycle
from jobs.models import LogChunk
from quotas import tenant_secrets
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
        # JSON-escaped: a quote, a backslash and a newline
        (QUOTED, json.dumps({"password": QUOTED}), '{"password": "***"}'),
        (TOKEN + "\n", json.dumps({"token": TOKEN + "\n"}), '{"token": "***"}'),
        # a 5-character value: hidden percent-encoded, but its base64 is too short to hide
        ("a b/c", f"{quote_plus('a b/c')} {b64('a b/c')}", f"*** {b64('a b/c')}"),
        # text that only resembles the value's base64 (its first 6 characters') is left
        (TOKEN, f"{b64(TOKEN)} {b64('hf_abc')} {b64('user:')}", "*** aGZfYWJj dXNlcjo="),
    ],
)  # fmt: skip
def test_it_hides_a_value_printed_encoded(alpha, attempt, value, printed, want):
    tenant_secrets.put(alpha, "HF_TOKEN", value)

    (hidden,) = tenant_secrets.masks([attempt.pk]).values()

    assert tenant_secrets.mask(printed, hidden) == want


def test_it_hides_a_basic_header_in_the_stored_log(agent, alpha, attempt):
    tenant_secrets.put(alpha, "HF_TOKEN", TOKEN)
    header = f"Authorization: Basic {b64('user:' + TOKEN)}"
    line = {"attempt_id": attempt.pk, "rank": 0, "seq": 0, "stream": "stdout", "text": header}

    agent.post("/api/v1/agent/east/logs/", {"lines": [line]}, format="json")

    assert LogChunk.objects.get(attempt=attempt).text == "Authorization: Basic dXNlcjp***"


def test_a_base64_run_shorter_than_the_minimum_is_not_a_mask():
    six_bytes = tenant_secrets.base64_forms(b"abcdef")
    five_bytes = tenant_secrets.base64_forms(b"abcde")

    assert six_bytes == {"YWJjZGVm"}  # aligned only: its other alignments have 7 characters
    assert five_bytes == set()
