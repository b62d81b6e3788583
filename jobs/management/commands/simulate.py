"""``manage.py simulate``: the trace simulator (see jobs.simulator.cli for the options)."""

import argparse

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Replay GPU-cluster traces: `simulate fgd ...` or `simulate replay ...`."
    # The simulator touches neither the database nor the apps: no system checks needed.
    requires_system_checks = []

    def add_arguments(self, parser):
        # The simulator owns its options; everything after the mode is handed to it as is.
        parser.add_argument("argv", nargs=argparse.REMAINDER, help="fgd|replay and its options")

    def handle(self, *args, **options):
        from jobs.simulator.cli import main

        code = main(list(options["argv"]))
        if code:
            raise CommandError(f"simulate exited with status {code}", returncode=code)
