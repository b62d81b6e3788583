"""Fast bulk writes: the scheduler's commit inserts, and the updates of many rows at once that
a cycle's explanations and an agent's heartbeat make."""

from django.db import connection
from django.db.models import Model


def insert(model: type[Model], rows: list[dict]) -> None:
    """Insert rows of `model`, each a dict of field attnames; unnamed fields take their
    defaults. No ids come back.

    PostgreSQL gets a COPY from plain tuples, which skips both building model instances and
    bulk_create's per-value work: several times faster for the thousands of rows one cycle
    commits. Elsewhere, bulk_create. Only for models whose fields psycopg adapts as they are
    (no JSON fields).
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create([model(**row) for row in rows])
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    defaults = {f.attname: f.get_default() for f in fields}
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({columns}) FROM STDIN"
    names = [f.attname for f in fields]
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row([row.get(name, defaults[name]) for name in names])


def update(model: type[Model], names: list[str], rows: list[tuple]) -> None:
    """Set the fields ``names`` (attnames) of many rows of `model`, each row ``(pk, *values)``.

    PostgreSQL gets one ``UPDATE ... FROM (VALUES ...)``: Django's bulk_update builds a CASE
    per column and row, which PostgreSQL evaluates row by row against every WHEN, an order of
    magnitude slower for hundreds of rows. Elsewhere, bulk_update."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        objs = [model(pk=pk, **dict(zip(names, values, strict=True))) for pk, *values in rows]
        model.objects.bulk_update(objs, names)
        return
    meta, quote = model._meta, connection.ops.quote_name
    fields = [meta.pk, *(meta.get_field(name) for name in names)]
    casts = ", ".join(f"%s::{f.cast_db_type(connection)}" for f in fields)
    values = ", ".join([f"({casts})"] * len(rows))
    aliases = [f"v{i}" for i in range(len(fields))]
    sets = ", ".join(
        f"{quote(f.column)} = v.{a}" for f, a in zip(fields[1:], aliases[1:], strict=True)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(meta.db_table)} AS t SET {sets} "
            f"FROM (VALUES {values}) AS v({', '.join(aliases)}) "
            f"WHERE t.{quote(meta.pk.column)} = v.{aliases[0]}",
            [value for row in rows for value in row],
        )
