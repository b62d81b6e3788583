"""A downloaded CLI knows its release, and tells its user when the server gives another one:
the archive names its release (jobs/cli/release.txt, a digest of all it holds but its server),
every answer of the API names the server's (`Mlsched-Cli-Release`), and a copy of another
release says once, on stderr, the command that replaces it; a checkout says nothing."""

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests

from jobs import cli_archive
from jobs.models import LogChunk
from quotas.tokens import create_token
from tests.factories import AttemptFactory, JobFactory
from tests.jobs.test_cli_download import downloaded, run  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent.parent
EARLIER = "0123456789abcdef"  # a release this server does not give


def release_of(archive: bytes) -> str:
    return zipfile.ZipFile(io.BytesIO(archive)).read("jobs/cli/release.txt").decode()


def of_release(path: Path, release: str) -> Path:
    """The downloaded CLI as a copy of another release names itself: one downloaded before
    the server's last upgrade."""
    held = zipfile.ZipFile(path)
    out = io.BytesIO(cli_archive.SHEBANG)
    out.seek(0, io.SEEK_END)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as copy:
        for info in held.infolist():
            named = info.filename == "jobs/cli/release.txt"
            copy.writestr(info, f"{release}\n".encode() if named else held.read(info))
    older = path.with_name("mlsched")
    older.write_bytes(out.getvalue())
    return older


def notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "another release of mlsched" in line]


@pytest.fixture
def logged(alpha, alice):
    """A job of Alice's with a line of output, and a token of hers."""
    attempt = AttemptFactory(job=JobFactory(tenant=alpha, owner=alice))
    LogChunk.objects.create(attempt=attempt, seq=0, text="accuracy 0.91")
    return attempt.job, create_token(alice, "laptop")[1]


def test_the_archive_names_its_release():
    archive = cli_archive.archive("https://ml.example.com")

    assert release_of(archive) == f"{cli_archive.release()}\n"
    assert len(cli_archive.release()) == 16


def test_copies_named_for_two_addresses_are_of_one_release():
    public = cli_archive.archive("https://ml.example.com")
    inside = cli_archive.archive("http://10.0.0.7:8000")

    assert public != inside
    assert release_of(public) == release_of(inside)


def test_the_apis_answers_name_the_release_the_server_gives(client, alice):
    refused = client.get("/api/v1/me/")
    client.force_login(alice)
    answered = client.get("/api/v1/me/")

    assert refused.status_code == 401 and answered.status_code == 200
    assert refused["Mlsched-Cli-Release"] == answered["Mlsched-Cli-Release"]
    assert answered["Mlsched-Cli-Release"] == cli_archive.release()
    assert not client.get("/tokens/").has_header("Mlsched-Cli-Release")  # a page, not the API


def test_an_older_copy_says_once_how_to_update(downloaded, logged, live_server):  # noqa: F811
    job, token = logged
    older = of_release(downloaded, EARLIER)

    done = run(older, "logs", str(job.id), MLSCHED_TOKEN=token)  # two requests

    assert done.returncode == 0, done.stderr
    assert done.stdout == "[1.0] accuracy 0.91\n"
    assert notices(done.stderr) == [
        f"{live_server.url} gives another release of mlsched than this one; to update it: "
        f"curl -fo {older} {live_server.url}/cli/mlsched.pyz"
    ]


def test_an_older_copys_json_on_stdout_stays_clean(downloaded, logged):  # noqa: F811
    job, token = logged

    done = run(of_release(downloaded, EARLIER), "status", str(job.id), "--json",
               MLSCHED_TOKEN=token)  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == job.id
    assert len(notices(done.stderr)) == 1


def test_mlsched_no_update_notifier_silences_it(downloaded, logged):  # noqa: F811
    job, token = logged
    older = of_release(downloaded, EARLIER)

    told = run(older, "status", str(job.id), MLSCHED_TOKEN=token)
    silenced = run(
        older, "status", str(job.id), MLSCHED_TOKEN=token, MLSCHED_NO_UPDATE_NOTIFIER="1"
    )

    assert len(notices(told.stderr)) == 1
    assert silenced.returncode == 0 and notices(silenced.stderr) == []


def test_a_copy_of_the_servers_release_says_nothing(downloaded, logged, live_server):  # noqa: F811
    job, token = logged
    answer = requests.get(f"{live_server.url}/api/v1/me/", timeout=30)

    done = run(downloaded, "status", str(job.id), MLSCHED_TOKEN=token)

    assert answer.headers["Mlsched-Cli-Release"] == release_of(downloaded.read_bytes()).strip()
    assert done.returncode == 0, done.stderr
    assert notices(done.stderr) == []


def test_a_checkout_says_nothing(logged, live_server):
    job, token = logged
    answer = requests.get(f"{live_server.url}/api/v1/me/", timeout=30)
    env = {"PATH": "/usr/bin:/bin", "MLSCHED_URL": live_server.url, "MLSCHED_TOKEN": token}

    done = subprocess.run([sys.executable, "-m", "jobs.cli", "status", str(job.id)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip

    assert answer.headers["Mlsched-Cli-Release"]  # the server names its release all the same
    assert done.returncode == 0, done.stderr
    assert notices(done.stderr) == []
