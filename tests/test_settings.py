"""Settings a deployment cannot get wrong silently."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.views.debug import ExceptionReporter

from mlsched_site.settings import database_url_read

ROOT = Path(__file__).resolve().parents[1]
LOAD = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"


def load_settings(**env) -> subprocess.CompletedProcess:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "DATABASE_URL")
    }
    env = {**clean, "DJANGO_SETTINGS_MODULE": "mlsched_site.settings", **env}
    return subprocess.run([sys.executable, "-c", LOAD], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_a_deployment_on_postgresql_without_a_secret_key_refuses_to_start():
    run = load_settings(DATABASE_URL="postgresql://postgres@127.0.0.1:5432/mlsched")

    assert run.returncode != 0
    assert "SECRET_KEY must be set" in run.stderr


def test_the_embedded_mode_and_debug_fall_back_to_a_development_key():
    embedded = load_settings()
    debug = load_settings(DATABASE_URL="postgresql://postgres@127.0.0.1:5432/mlsched", DEBUG="1")

    assert embedded.stdout.strip() == debug.stdout.strip() == "mlsched-insecure-development-key"


def test_a_configured_key_is_used():
    run = load_settings(DATABASE_URL="postgresql://postgres@127.0.0.1:5432/mlsched", SECRET_KEY="k")

    assert run.stdout.strip() == "k"


CONNECT = (
    "import django; django.setup(); from django.db import connection; "
    "connection.ensure_connection()"
)


@pytest.fixture
def silent_database():
    """An address that takes TCP connections and never answers, as a database host dropping
    packets looks to a client: its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        yield f"postgresql://postgres@127.0.0.1:{listener.getsockname()[1]}/mlsched"
    finally:
        listener.close()


def test_a_database_that_never_answers_fails_the_connection_in_seconds(silent_database):
    env = {**os.environ, "DATABASE_URL": silent_database, "SECRET_KEY": "k",
           "DJANGO_SETTINGS_MODULE": "mlsched_site.settings"}  # fmt: skip
    # Without a timeout of its own it would wait for ever: past a minute this test fails.
    run = subprocess.run([sys.executable, "-c", CONNECT], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip

    assert run.returncode != 0 and "OperationalError" in run.stderr
    assert "timeout expired" in run.stderr  # libpq's connect_timeout


SERVED_BY = (
    "import django; django.setup(); from django.db import connection; "
    "cursor = connection.cursor(); cursor.execute('SELECT inet_server_port()'); "
    "print(cursor.fetchone()[0])"
)


@pytest.mark.django_db
def test_a_url_naming_a_primary_and_its_standbys_connects_to_the_first_that_answers(
    silent_database,
):
    """libpq's form for a primary and its standbys: the first here is down (a failed primary,
    its connections refused), the second is silent (one dropping packets, past its timeout),
    the third is this machine's PostgreSQL."""
    db = connection.settings_dict
    down = "127.0.0.1:1"
    silent = silent_database.split("@")[1].split("/")[0]
    url = (f"postgresql://{db['USER']}:{db['PASSWORD']}@{down},{silent},{db['HOST']}:{db['PORT']}"
           f"/{db['NAME']}?target_session_attrs=read-write&connect_timeout=1")  # fmt: skip
    env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": "k",
           "DJANGO_SETTINGS_MODULE": "mlsched_site.settings"}  # fmt: skip

    run = subprocess.run([sys.executable, "-c", SERVED_BY], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip

    assert (run.returncode, run.stdout.strip()) == (0, str(db["PORT"])), run.stderr


def test_several_hosts_are_read_with_their_ports_the_default_one_and_v6_addresses():
    db = database_url_read("postgresql://u:p%40ss@primary,[fd00::2]:6432,standby:7/mlsched"
                           "?target_session_attrs=read-write")  # fmt: skip

    assert (db["HOST"], db["PORT"]) == ("primary,fd00::2,standby", "5432,6432,7")
    assert (db["USER"], db["PASSWORD"], db["NAME"]) == ("u", "p@ss", "mlsched")
    assert db["OPTIONS"] == {"target_session_attrs": "read-write"}


PASSWORD = "s3cret-" + "pass"  # spelt apart: the page quotes the source around the error


@pytest.fixture
def service_passwords(settings):
    address = f"redis://:{PASSWORD}@redis.internal:6379/0"
    settings.REDIS_URL = settings.CELERY_BROKER_URL = address
    layer = {"BACKEND": "channels.layers.InMemoryChannelLayer",
             "CONFIG": {"hosts": [{"address": address}]}}  # fmt: skip
    settings.CHANNEL_LAYERS = {"default": layer}
    settings.DEBUG = True


def error_page(request) -> str:
    """Django's DEBUG page for an error in a view."""
    try:
        raise RuntimeError("a view failed")
    except RuntimeError:
        return ExceptionReporter(request, *sys.exc_info()).get_traceback_html()


def test_error_pages_hide_the_passwords_in_service_addresses(rf, service_passwords):
    page = error_page(rf.get("/"))

    assert "a view failed" in page  # the page is drawn, settings and all
    assert "REDIS_URL" in page and PASSWORD not in page
