"""`manage.py export_teams [--tenant SLUG ...]`: the teams as the file `apply_teams` takes,
written from the database (quotas.exported), to keep under version control."""

from django.core.management.base import BaseCommand, CommandError

from quotas import exported


class Command(BaseCommand):
    help = (
        "Write the tenants (their fields, quotas, default priority class and members given by "
        "hand) and the priority classes as the YAML file apply_teams takes: applying it changes "
        "nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--tenant", dest="slugs", action="append", metavar="SLUG",
            help="Only this tenant (several: one --tenant each); the classes are all written.",
        )  # fmt: skip

    def handle(self, *args, slugs, **options):
        if missing := exported.unknown(slugs):
            raise CommandError(f"--tenant: no tenant {missing!r}")
        self.stdout.write(exported.written(exported.document(slugs)), ending="")
