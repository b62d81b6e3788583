"""The local backend gives a worker its job's secrets as environment variables and keeps them
no longer than the attempt."""

import dataclasses
import sys

from tests.clusters.test_local_backend import ended, spec

SHOW = "import os; print(os.environ['HF_TOKEN'], os.environ['FROM_JOB'], os.environ['RANK'])"


def test_a_worker_gets_its_jobs_secrets_beside_its_env(backend):
    backend.start(
        dataclasses.replace(spec([sys.executable, "-c", SHOW]), secrets={"HF_TOKEN": "t0k"})
    )

    assert ended(backend)
    assert backend.logs()[0].text == "t0k yes 0"


def test_the_secrets_stay_in_the_agents_own_file_until_the_attempt_is_forgotten(backend):
    secret = dataclasses.replace(spec([sys.executable, "-c", "pass"]), secrets={"HF_TOKEN": "t0k"})
    backend.start(secret)
    assert ended(backend)
    stored = backend.worker_dir(1, 0) / "spec.json"
    kept, mode = stored.read_text(), stored.stat().st_mode & 0o777

    backend.forget(1)

    assert "t0k" in kept and mode == 0o600
    assert not stored.exists()
