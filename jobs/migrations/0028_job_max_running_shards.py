"""A batch's limit on how many of its shards run at once (`Job.max_running_shards`, Slurm's
array throttle, --array=0-999%10), on every shard row of the batch.

A nullable column whose database default is NULL: PostgreSQL adds it to the catalog alone,
without rewriting the table, however many jobs are stored, and a row written without it (by
code from before, or a test replaying older migrations) has no limit. Reversed, it is dropped.
"""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0027_family_label"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="max_running_shards",
            field=models.PositiveIntegerField(
                blank=True,
                db_default=None,
                default=None,
                help_text="At most this many of the batch's shards run at once (Slurm's "
                "--array=...%N); the others wait until one ends. Empty: no limit.",
                null=True,
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
    ]
