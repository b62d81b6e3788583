"""The database's own guard against handing out the same GPU twice.

Two active allocations on one GPU must have disjoint milli ranges. PostgreSQL enforces it with
an exclusion constraint (safe under concurrent transactions: the second insert waits for the
first and then fails); SQLite, which serialises writers, with triggers.
"""

from django.db import migrations

PG_CREATE = [
    "CREATE EXTENSION IF NOT EXISTS btree_gist",
    """
    ALTER TABLE clusters_allocation ADD CONSTRAINT allocation_no_gpu_overcommit
    EXCLUDE USING gist (
        node_id WITH =,
        gpu_index WITH =,
        int4range(gpu_milli_start, gpu_milli_start + gpu_milli) WITH &&
    ) WHERE (active AND gpu_index IS NOT NULL)
    """,
]
PG_DROP = ["ALTER TABLE clusters_allocation DROP CONSTRAINT allocation_no_gpu_overcommit"]

SQLITE_OVERLAP = """
    NEW.active AND NEW.gpu_index IS NOT NULL AND EXISTS (
        SELECT 1 FROM clusters_allocation a
        WHERE a.active AND a.id IS NOT NEW.id
          AND a.node_id = NEW.node_id AND a.gpu_index = NEW.gpu_index
          AND a.gpu_milli_start < NEW.gpu_milli_start + NEW.gpu_milli
          AND NEW.gpu_milli_start < a.gpu_milli_start + a.gpu_milli
    )
"""
SQLITE_CREATE = [
    f"""
    CREATE TRIGGER allocation_no_gpu_overcommit_{event.lower()}
    BEFORE {event} ON clusters_allocation WHEN {SQLITE_OVERLAP}
    BEGIN SELECT RAISE(ABORT, 'allocation_no_gpu_overcommit'); END
    """
    for event in ("INSERT", "UPDATE")
]
SQLITE_DROP = [
    f"DROP TRIGGER allocation_no_gpu_overcommit_{event}" for event in ("insert", "update")
]


def run(statements_by_vendor):
    def apply(apps, schema_editor):
        for sql in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("clusters", "0002_initial")]

    operations = [
        migrations.RunPython(
            run({"postgresql": PG_CREATE, "sqlite": SQLITE_CREATE}),
            run({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
        ),
    ]
