"""Jobs' labels, and a GIN index of them (PostgreSQL only) for the job lists' `label` filter.

The column's default is `{}` in the database too (`db_default`), so rows an older release
writes while this one rolls out, or SQL writes, carry no labels rather than being refused.
`JobQuerySet.labelled` asks PostgreSQL for `labels @> '{"key": "value"}'` (or `labels ? 'key'`),
which the index answers (the default jsonb_ops class serves both operators); without it a
filter on a label no job carries reads every job of the caller's tenants. The column is added
with a constant default, which PostgreSQL stores without rewriting the table; the index is
built CONCURRENTLY, so a live platform keeps submitting while it is built, as the name search's
trigram index is (0022, whose notes on a failed build apply here too).

SQLite (the embedded mode) has no GIN index: nothing is built there, and its filters compare
each job's value.
"""

from django.db import migrations, models

from jobs.migrations._indexes import build_concurrently, drop_concurrently

INDEX = "job_labels_gin"
CREATE = f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON jobs_job USING gin (labels)"


def create_index(apps, schema_editor):
    build_concurrently(schema_editor, INDEX, [CREATE])


def drop_index(apps, schema_editor):
    drop_concurrently(schema_editor, INDEX)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("jobs", "0029_attempt_stop_cause"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="labels",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, models.JSONField()),
                default=dict,
                help_text="The submitter's own labels (project=llm, sweep=lr-3), to find and "
                "count the job by; the scheduler does not read them.",
            ),
        ),
        migrations.RunPython(create_index, drop_index, elidable=False),
    ]
