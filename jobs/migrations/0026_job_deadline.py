"""A job's deadline (`Job.deadline`, Slurm's --deadline), as the submission asked it.

A nullable column with no default: PostgreSQL adds it to the catalog alone, without rewriting
the table, however many jobs are stored. Jobs from before have none. The partial index holds
the queued jobs with a deadline only, which the janitor reads every turn: none when it is
built, so building it reads the table once and writes nothing. Reversed, both are dropped.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0025_job_begin"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="deadline",
            field=models.DateTimeField(
                blank=True,
                help_text="Canceled while queued once it could no longer end by this time, "
                "were it started at once and run for its whole runtime limit (Slurm's "
                "--deadline). Empty: none.",
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("deadline__isnull", False), ("state", "queued")),
                fields=["deadline"],
                name="job_queued_deadline",
            ),
        ),
    ]
