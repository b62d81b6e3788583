"""A job's deferred start (`Job.begin`, Slurm's --begin), as the submission asked it.

A nullable column with no default: PostgreSQL adds it to the catalog alone, without rewriting
the table, however many jobs are stored. Jobs from before have none. The scheduler does not read
it: a submission with a begin also sets `not_before`, as a retry's backoff does. Reversed, the
column is dropped.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0024_logchunk_logged_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="begin",
            field=models.DateTimeField(
                blank=True,
                help_text="Deferred start: not placed before this time (Slurm's --begin). "
                "Empty: as soon as it may run.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="not_before",
            field=models.DateTimeField(
                blank=True,
                help_text="Not placed before this time: the job's begin, then its retry's "
                "backoff.",
                null=True,
            ),
        ),
    ]
