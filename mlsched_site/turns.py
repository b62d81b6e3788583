"""Writers that take turns: a PostgreSQL advisory lock held to the end of the caller's
transaction, so that two transactions that check something and then write on it cannot both
pass the check. SQLite, the embedded mode's database, has one writer at a time already."""

from django.db import connection


def take_turn(space: int, key: int | str) -> None:
    """Wait for any other transaction holding the turn `key` of lock space `space` (a text
    key is hashed into one) to end, and hold it to the end of this one."""
    if connection.vendor != "postgresql":
        return
    sql = "SELECT pg_advisory_xact_lock(%s, " + ("hashtext(%s))" if isinstance(key, str) else "%s)")
    with connection.cursor() as cursor:
        cursor.execute(sql, [space, key])
