"""Run the scheduler loop in this process (what the Celery task does, without Celery)."""

import logging
import time

from django.core.management.base import BaseCommand
from django.db import connection

from jobs import scheduler

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run scheduler ticks: forever, or --ticks N times."

    def add_arguments(self, parser):
        parser.add_argument("--ticks", type=int, default=0, help="Stop after N ticks (0: never).")
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument("--start-at", type=float, default=0.0, help="Wait until this time.")

    def handle(self, *args, ticks, interval, start_at, **options):
        time.sleep(max(0.0, start_at - time.time()))
        done = placed = skipped = errors = 0
        while ticks == 0 or done < ticks:
            try:
                result = scheduler.tick()
            except Exception:
                # Nothing a tick meets may end the loop (a lost connection, a failover, a bug
                # one job's data triggers): logged, and the next tick retries afresh.
                log.exception("scheduler tick failed")
                result, errors = None, errors + 1
                connection.close()
            done += 1
            if result is not None:
                placed += len(result.placed)
                skipped += len(result.skipped)
            if ticks == 0 or done < ticks:
                time.sleep(interval)
        self.stdout.write(f"ticks: {done} placed: {placed} skipped: {skipped} errors: {errors}")
