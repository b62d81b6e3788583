"""Run the scheduler loop in this process (what the Celery task does, without Celery)."""

import time

from django.core.management.base import BaseCommand

from jobs import scheduler


class Command(BaseCommand):
    help = "Run scheduler ticks: forever, or --ticks N times."

    def add_arguments(self, parser):
        parser.add_argument("--ticks", type=int, default=0, help="Stop after N ticks (0: never).")
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument("--start-at", type=float, default=0.0, help="Wait until this time.")

    def handle(self, *args, ticks, interval, start_at, **options):
        time.sleep(max(0.0, start_at - time.time()))
        done = placed = skipped = 0
        while ticks == 0 or done < ticks:
            result = scheduler.tick()
            done += 1
            if result is not None:
                placed += len(result.placed)
                skipped += len(result.skipped)
            if ticks == 0 or done < ticks:
                time.sleep(interval)
        self.stdout.write(f"ticks: {done} placed: {placed} skipped: {skipped}")
