"""When a job became free to run (`Job.eligible_at`): queue waits run from it, not from submit.

A nullable column with no default: PostgreSQL adds it to the catalog alone, without rewriting
the table or holding its lock for longer than that, however many jobs there are. No row is
filled in: a started job without it, which every job started before this migration is, has
its wait counted from its submission (`jobs.usage_queries.eligible_since`), the figure a fill would
have written, without rewriting millions of rows. The scheduler's next cycle stamps the queued
jobs it finds free to run (`jobs.actions.stamp_eligible`): one with nothing to wait for from
its submission or its backoff's end, one queued behind dependencies or as a singleton from
that cycle. Reversed, the column is dropped.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0022_job_name_trigram"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="eligible_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When the job last became free to run before its first start (not "
                "held, its dependencies met, no earlier job of a singleton's group live, past "
                "its retry backoff): its queue wait runs from here. Empty while it is not; kept "
                "once it starts.",
                null=True,
            ),
        ),
    ]
