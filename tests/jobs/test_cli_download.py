"""The command line as one file to download (`GET /cli/mlsched.pyz`, jobs/cli_archive.py): it
runs on a Python with nothing installed (run here with `-I -S`: no site-packages at all), talks
to the server it came from unless MLSCHED_URL says otherwise, and carries its libraries'
licenses."""

import io
import re
import subprocess
import sys
import zipfile

import pytest
import requests

from jobs import cli_archive
from quotas.tokens import create_token
from tests.factories import NodeFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db(transaction=True)

BARE = [sys.executable, "-I", "-S"]  # no site-packages: neither Django nor requests


@pytest.fixture
def downloaded(live_server, tmp_path):
    answer = requests.get(f"{live_server.url}/cli/mlsched.pyz", timeout=30)
    assert answer.status_code == 200
    path = tmp_path / "mlsched.pyz"
    path.write_bytes(answer.content)
    return path


def run(path, *args, **env):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path.parent), **env}
    return subprocess.run([*BARE, str(path), *args], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_the_bare_interpreter_has_no_libraries():
    done = subprocess.run([*BARE, "-c", "import requests"], capture_output=True, timeout=30)

    assert done.returncode != 0


def test_it_is_served_to_anyone_as_a_zip_application(live_server):
    answer = requests.get(f"{live_server.url}/cli/mlsched.pyz", timeout=30)

    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "application/zip"
    assert answer.headers["Content-Disposition"] == 'attachment; filename="mlsched.pyz"'
    assert answer.content.startswith(b"#!/usr/bin/env python3\n")
    assert "__main__.py" in zipfile.ZipFile(io.BytesIO(answer.content)).namelist()


def test_a_copy_already_held_is_not_sent_again(live_server):
    first = requests.get(f"{live_server.url}/cli/mlsched.pyz", timeout=30)

    again = requests.get(f"{live_server.url}/cli/mlsched.pyz", timeout=30,
                         headers={"If-None-Match": first.headers["ETag"]})  # fmt: skip

    assert again.status_code == 304 and again.content == b""


def test_it_runs_without_any_library_installed_against_the_server_it_came_from(downloaded, alice):
    _, token = create_token(alice, "laptop")

    done = run(downloaded, "whoami", MLSCHED_TOKEN=token)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("alice, ")


def test_it_reads_a_yaml_job_file_and_checks_it_with_the_server(downloaded, alice, east):
    PriorityClassFactory()  # the default class, which a flushed database no longer has
    NodeFactory(cluster=east)
    _, token = create_token(alice, "laptop")
    job = downloaded.parent / "job.yaml"
    job.write_text("tenant: alpha\nname: eval\nfamily: evaluation\nimage: python:3.11\n"
                   "command: [python, -c, pass]\ncpu_milli: 500\nmemory_mb: 256\n"
                   "max_runtime_s: 60\n")  # fmt: skip

    done = run(downloaded, "submit", str(job), "--test-only", MLSCHED_TOKEN=token)

    assert done.returncode == 0, done.stderr
    assert "would start now" in done.stdout


def test_mlsched_url_says_another_server(downloaded, alice):
    _, token = create_token(alice, "laptop")

    done = run(downloaded, "whoami", MLSCHED_TOKEN=token, MLSCHED_URL="http://127.0.0.1:9")

    assert done.returncode == 1
    assert "cannot reach http://127.0.0.1:9/api/v1/" in done.stderr


def test_it_names_the_platforms_public_address_where_one_is_set(client, settings):
    settings.MLSCHED_PUBLIC_URL = "https://ml.example.com"

    answer = client.get("/cli/mlsched.pyz")

    zipped = zipfile.ZipFile(io.BytesIO(answer.getvalue()))
    assert zipped.read("jobs/cli/server.txt") == b"https://ml.example.com\n"


def test_a_copy_naming_the_address_asked_is_not_shared_by_caches_across_hosts(client, settings):
    asked = client.get("/cli/mlsched.pyz")
    settings.MLSCHED_PUBLIC_URL = "https://ml.example.com"
    public = client.get("/cli/mlsched.pyz")

    assert (asked["Vary"], asked["Cache-Control"]) == ("Host", "private")
    assert not public.has_header("Vary") and not public.has_header("Cache-Control")


def test_it_is_the_same_bytes_at_every_build():
    first = cli_archive.archive("https://ml.example.com")
    cli_archive.archive.cache_clear()
    cli_archive.entries.cache_clear()

    assert cli_archive.archive("https://ml.example.com") == first


def test_it_carries_each_librarys_license():
    names = zipfile.ZipFile(io.BytesIO(cli_archive.archive("https://x"))).namelist()

    licensed = {name.split("/")[1] for name in names if name.startswith("licenses/")}
    assert licensed == set(cli_archive.LIBRARIES.values())
    assert not [name for name in names if name.endswith((".so", ".pyc"))]


def test_the_api_tokens_page_links_it_and_says_how_to_use_a_new_token(client, alice):
    client.force_login(alice)

    page = client.post("/tokens/", {"name": "laptop", "expires": ""}).content.decode()

    assert '<a href="/cli/mlsched.pyz" download>mlsched.pyz</a>' in page
    assert re.search(r'id="cli-usage">MLSCHED_TOKEN=mls_\S+ python3 mlsched.pyz list<', page)
