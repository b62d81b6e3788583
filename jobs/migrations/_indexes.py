"""Indexes built CONCURRENTLY on PostgreSQL, for migrations that add them to the job table on a
live platform (the migration loader skips this module: its name starts with "_").

A build that failed half-way leaves an invalid index behind, which IF NOT EXISTS would keep:
it is dropped and built again. A platform team may build an index ahead of the deploy with
the same statements (`psql`, outside a transaction); the migration then finds it valid and
keeps it. SQLite (the embedded mode) gets none of them.
"""


def build_concurrently(schema_editor, index: str, statements: list[str]) -> None:
    """Run `statements` (the CREATE INDEX CONCURRENTLY IF NOT EXISTS of `index`, and any
    around it) on PostgreSQL, after dropping an invalid `index` a failed build left."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [index]
        )
        invalid = cursor.fetchone()
    if invalid and invalid[0]:
        drop_concurrently(schema_editor, index)
    for sql in statements:
        schema_editor.execute(sql)


def drop_concurrently(schema_editor, index: str) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
