"""Transactions the database aborted to break a deadlock, run again.

Verbs lock rows in one order (a job before its attempts, jobs in id order), but a few paths
cannot: a submission locks the jobs it waits for while a failure's cascade locks the jobs that
wait for it, and since a queued job's dependencies can change, the two orders may meet in
reverse. PostgreSQL then aborts one of the transactions (deadlock_detected) and the other goes
on. The aborted one wrote nothing, and its locks are gone: running it again is safe, and
almost always succeeds, since the transaction it met has gone by.
"""

import functools
import logging

from django.db import OperationalError, connection, transaction

log = logging.getLogger(__name__)

AGAIN = {"40P01", "40001"}  # deadlock_detected, serialization_failure
RUNS = 3


def aborted_to_break_a_deadlock(error: OperationalError) -> bool:
    return getattr(error.__cause__, "sqlstate", None) in AGAIN


def atomic(fn):
    """transaction.atomic, run again (up to RUNS times in all) when the database aborts it as
    a deadlock's victim. Inside a caller's transaction there is nothing to run again: the
    caller's transaction is aborted too, and the error goes up to whoever began it."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if connection.in_atomic_block:
            with transaction.atomic():
                return fn(*args, **kwargs)
        for number in range(1, RUNS + 1):
            try:
                with transaction.atomic():
                    return fn(*args, **kwargs)
            except OperationalError as error:
                if number == RUNS or not aborted_to_break_a_deadlock(error):
                    raise
                log.warning("%s aborted to break a deadlock; running it again", fn.__qualname__)

    return run
