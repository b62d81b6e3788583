"""The clock of every time that one host writes and another compares: the database's.

Web hosts, the scheduler's host and agents' clocks may disagree by more than a timeout.
"""

from datetime import datetime

from django.db import connection
from django.utils import timezone


def database_now() -> datetime:
    """The database's time now (what ``Now()`` writes). SQLite is the embedded mode: one
    process, one clock."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]
