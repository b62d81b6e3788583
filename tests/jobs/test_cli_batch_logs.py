"""`logs` of a batch: each shard is a job with a log of its own. The batch's id shows shard 0's
and says so on standard error; `--shard N` picks shard N's, as Slurm's ID_N picks a task of a
job array. Against a live server, as a user runs it; the API's `?batch=&shard=` behind it."""

from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from jobs.cli import commands as cli_module
from jobs.models import Family, Job, LogChunk
from jobs.states import State
from quotas.tokens import create_token
from tests.factories import AttemptFactory, JobFactory
from tests.jobs.test_cli import run_cli

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(alice):
    return create_token(alice, "batch log tests")[1]


def a_batch(alice, alpha, shards=3, **kw) -> list[Job]:
    """A batch's shards, its first first, each with an attempt that wrote "shard <index>"."""
    spec = {"tenant": alpha, "owner": alice, "family": Family.BATCH_INFERENCE, "shards": shards}
    first = JobFactory(**spec, shard_index=0, **kw)
    jobs = [first, *(JobFactory(**spec, parent=first, shard_index=i, **kw)
                     for i in range(1, shards))]  # fmt: skip
    for job in jobs:
        LogChunk.objects.create(
            attempt=AttemptFactory(job=job), seq=0, text=f"shard {job.shard_index}"
        )
    return jobs


@pytest.fixture
def batch(alice, alpha) -> list[Job]:
    return a_batch(alice, alpha)


def logs(live_server, token, *args):
    return run_cli(live_server.url, token, "logs", *args)


def test_a_batchs_id_shows_shard_0_and_says_how_to_pick_another(live_server, token, batch):
    out = logs(live_server, token, str(batch[0].pk))

    assert out.returncode == 0, out.stderr
    assert out.stdout == "[1.0] shard 0\n"
    assert out.stderr == (f"job {batch[0].pk} is a batch of 3 shards: showing shard 0's log;"
                          " --shard N shows shard N's (0 to 2)\n")  # fmt: skip


@pytest.mark.parametrize("index", [0, 1, 2])
def test_shard_n_shows_that_shards_log_alone(live_server, token, batch, index):
    out = logs(live_server, token, str(batch[0].pk), "--shard", str(index))

    assert (out.returncode, out.stdout, out.stderr) == (0, f"[1.0] shard {index}\n", "")


def test_a_shard_past_the_last_is_an_error_naming_the_shards(live_server, token, batch):
    out = logs(live_server, token, str(batch[0].pk), "--shard", "3")

    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr == f"job {batch[0].pk} has no shard 3: its shards are 0 to 2\n"


def test_a_shards_own_id_shows_its_log_and_with_shard_points_at_its_batch(
    live_server, token, batch
):
    own = logs(live_server, token, str(batch[2].pk))
    picked = logs(live_server, token, str(batch[2].pk), "--shard", "1")

    assert (own.returncode, own.stdout, own.stderr) == (0, "[1.0] shard 2\n", "")
    assert picked.returncode == 1
    assert picked.stderr == (f"job {batch[2].pk} is shard 2 of batch {batch[0].pk}: ask for "
                             f"`logs {batch[0].pk} --shard 1`\n")  # fmt: skip


def test_a_job_that_is_no_batch_shows_its_log_without_a_note(live_server, token, alpha):
    attempt = AttemptFactory(job=JobFactory(tenant=alpha))
    LogChunk.objects.create(attempt=attempt, seq=0, text="accuracy 0.91")

    plain = logs(live_server, token, str(attempt.job_id))
    shard_0 = logs(live_server, token, str(attempt.job_id), "--shard", "0")
    shard_1 = logs(live_server, token, str(attempt.job_id), "--shard", "1")

    assert (plain.stdout, plain.stderr) == ("[1.0] accuracy 0.91\n", "")
    assert (shard_0.stdout, shard_0.stderr) == ("[1.0] accuracy 0.91\n", "")
    assert shard_1.returncode == 1
    assert shard_1.stderr == f"job {attempt.job_id} has no shard 1: it is not a batch\n"


@pytest.mark.parametrize("shard", ["-1", "x"])
def test_a_shard_that_is_no_index_is_a_usage_error(live_server, token, batch, shard):
    out = logs(live_server, token, str(batch[0].pk), f"--shard={shard}")

    assert out.returncode == 2
    assert "--shard" in out.stderr


def test_the_logs_help_says_how_to_pick_a_shard(live_server, token):
    out = run_cli(live_server.url, token, "--help")

    assert "logs ID [-f] [--tail N] [--shard N]" in out.stdout


def test_following_a_shard_reads_until_that_shard_ends(live_server, alice, alpha, token,
                                                       capsys):  # fmt: skip
    # Shard 0 has ended: a follow that read its state instead would stop at once.
    first, running = a_batch(alice, alpha, shards=2)
    Job.objects.filter(pk=first.pk).update(state=State.SUCCEEDED)
    Job.objects.filter(pk=running.pk).update(state=State.RUNNING)
    attempt = running.attempts.get()
    written = []

    class WritesWhileRunning(cli_module.Api):
        """The shard writes a line each time its state is read; it fails at the second."""

        def call(self, method, path, **kwargs):
            answer = super().call(method, path, **kwargs)
            if path == f"jobs/{running.pk}/" and answer["state"] == State.RUNNING:
                line = len(written) + 1
                written.append(LogChunk.objects.create(attempt=attempt, seq=line,
                                                       text=f"line {line}"))  # fmt: skip
                if len(written) == 2:
                    Job.objects.filter(pk=running.pk).update(state=State.FAILED)
            return answer

    api = WritesWhileRunning(live_server.url, token)
    cli_module.logs(api, SimpleNamespace(id=first.pk, shard=1, follow=True))

    assert capsys.readouterr().out == "[1.0] shard 1\n[1.0] line 1\n[1.0] line 2\n"


def test_the_list_gives_a_batchs_shard_by_its_index(alice, batch):
    client = APIClient()
    client.force_authenticate(alice)

    listed = client.get(f"/api/v1/jobs/?batch={batch[0].pk}&shard=2")
    bad = client.get(f"/api/v1/jobs/?batch={batch[0].pk}&shard=two")
    past = client.get(f"/api/v1/jobs/?batch={batch[0].pk}&shard={2**40}")
    alone = client.get("/api/v1/jobs/?shard=2")

    assert [job["id"] for job in listed.json()["jobs"]] == [batch[2].pk]
    assert bad.status_code == 400 and list(bad.json()) == ["shard"]
    assert past.json()["jobs"] == []
    assert alone.status_code == 400 and list(alone.json()) == ["shard"]
