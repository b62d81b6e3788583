"""``manage.py simulate``: the trace simulator (see jobs.simulator.cli for the options)."""

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Replay GPU-cluster traces: `simulate fgd ...` or `simulate replay ...` (-h for options)."
    )

    def run_from_argv(self, argv):
        # The simulator owns its argument parsing; hand it everything after "simulate".
        from jobs.simulator.cli import main

        code = main(argv[2:])
        if code:
            raise SystemExit(code)

    def handle(self, *args, **options):
        raise CommandError("run it as: manage.py simulate fgd|replay ...")
