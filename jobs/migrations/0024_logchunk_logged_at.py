"""When the worker wrote each log line (`LogChunk.logged_at`), as Kubernetes stamps it.

A nullable column with no default: PostgreSQL adds it to the catalog alone, without rewriting
the table or holding its lock for longer than that, however many lines are stored. No row is
filled in: a line stored before this migration, or by a backend that does not stamp lines (local),
has none, and a restarted agent numbers such a worker's log from line 0 as before. Reversed, the
column is dropped.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0023_job_eligible_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="logchunk",
            name="logged_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
