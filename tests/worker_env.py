"""Loaded by every pytest run (``-p tests.worker_env`` in pyproject.toml's ``addopts``)
before Django reads its settings: each pytest-xdist worker gets Redis databases of its own,
as pytest-django gives each its own test database. Worker N uses REDIS_URL's database and
MLSCHED_THROTTLE_REDIS_DB each moved up by 2 (N + 1): tests that clear the caches or run a
Celery worker on the broker touch only their own. With the defaults (0 and 1), worker 0 uses
databases 2 and 3, worker 1 4 and 5."""

import os
from urllib.parse import urlsplit, urlunsplit

worker = os.environ.get("PYTEST_XDIST_WORKER")
if worker and os.environ.get("REDIS_URL"):
    step = 2 * (int(worker.removeprefix("gw")) + 1)
    parts = urlsplit(os.environ["REDIS_URL"])
    database = int(parts.path.strip("/") or 0)
    os.environ["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{database + step}"))
    throttle = int(os.environ.get("MLSCHED_THROTTLE_REDIS_DB", "1"))
    os.environ["MLSCHED_THROTTLE_REDIS_DB"] = str(throttle + step)
