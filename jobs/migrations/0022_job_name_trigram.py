"""A trigram index for searches of job names (PostgreSQL only).

The portal's `?q=` and the admin's job search filter on `name__icontains`, which Django writes
as `UPPER("jobs_job"."name"::text) LIKE UPPER('%q%')`: without an index on that expression
PostgreSQL reads every job. A GIN index of the expression's trigrams (pg_trgm) finds the jobs
holding the searched text; the expression is indexed exactly as Django writes it, or the
planner would not match it. A search of one or two characters holds no trigram and the planner
keeps its previous plan.

The index is built CONCURRENTLY, so a live platform keeps submitting and updating jobs while
it is built (minutes on millions of jobs); the migration is therefore not atomic. A build that
failed half-way leaves an invalid index behind: it is dropped and built again on the next run.
A platform team may build the index ahead of the deploy with the statements below (`psql`
outside a transaction); the migration then finds it valid and keeps it. pg_trgm is a
trusted extension (PostgreSQL 13+): the database owner may create it without superuser rights.

SQLite (the embedded mode) has no trigram index: nothing happens there, and its searches scan
as before.
"""

from django.db import migrations

from jobs.migrations._indexes import build_concurrently, drop_concurrently

INDEX = "job_name_trgm"
CREATE = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON jobs_job "
    "USING gin ((UPPER(name::text)) gin_trgm_ops)",
    # The planner's statistics of the indexed expression: without them it guesses how many
    # jobs a search matches, and may read thousands of a common name's matches through the
    # index to show the newest 50 instead of walking the primary key back.
    "ANALYZE jobs_job",
]


def create_index(apps, schema_editor):
    build_concurrently(schema_editor, INDEX, CREATE)


def drop_index(apps, schema_editor):
    # The extension stays: other database objects may use it, and it costs nothing unused.
    drop_concurrently(schema_editor, INDEX)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("jobs", "0021_checkpoints_of_their_own"),
    ]

    operations = [
        migrations.RunPython(create_index, drop_index, elidable=False),
    ]
