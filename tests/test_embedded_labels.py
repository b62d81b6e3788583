"""Labels on SQLite (the embedded mode): a key of digits is read as a key, by the list's label
filter and by the usage report's split. Run in a child process on a SQLite database of its
own, as `make run` serves it."""

from tests.processes import sqlite_shell

LABELLED = """
from datetime import UTC, datetime, timedelta
from django.core.management import call_command
from django.db import connection
from jobs import reports
from jobs.models import Job
from tests.factories import TenantFactory
from tests.jobs.test_usage_report import run

call_command("migrate", verbosity=0)
alpha = TenantFactory(slug="alpha")
start = datetime(2025, 3, 1, tzinfo=UTC)
first = run(alpha, start, start + timedelta(hours=2), labels={"2024": "q1"}).job
run(alpha, start, start + timedelta(hours=1), labels={"2024": "q2"})
print("VENDOR", connection.vendor)
print("LISTED", [job.pk for job in Job.objects.labelled([("2024", "q1")])], "FIRST", first.pk)
(usage,) = reports.usage([alpha], start, start + timedelta(days=1), start + timedelta(days=2),
                         "2024").tenants
print("SPLIT", sorted((u.gpu_type, round(u.gpu_hours, 3)) for u in usage.by_label))
"""


def test_a_label_key_of_digits_is_a_key_on_sqlite(tmp_path):
    run = sqlite_shell(LABELLED, tmp_path)

    first = run.stdout.split("FIRST ")[-1].split("\n")[0]
    assert "VENDOR sqlite" in run.stdout, (run.stdout, run.stderr)
    assert f"LISTED [{first}]" in run.stdout, (run.stdout, run.stderr)
    assert "SPLIT [('q1', 2.0), ('q2', 1.0)]" in run.stdout, (run.stdout, run.stderr)
