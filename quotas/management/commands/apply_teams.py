"""`manage.py apply_teams FILE`: make the tenants, their quotas and the priority classes as a
YAML or JSON file kept under version control declares them (quotas.declared), all of it or,
refused, none of it."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from quotas import declared


def acting_user(username: str | None):
    """Who the changes are recorded as: the platform admin (a superuser) named, else the
    first one: a team's settings and quotas are the platform admins' to make."""
    users = get_user_model().objects
    if username is not None:
        user = users.filter(**{users.model.USERNAME_FIELD: username}).first()
        if user is None or not user.is_superuser:
            raise CommandError(f"--as: {username!r} is no platform admin (superuser)")
        return user
    user = users.filter(is_superuser=True).order_by("pk").first()
    if user is None:
        raise CommandError("there is no superuser to record the changes as: name a user with --as")
    return user


class Command(BaseCommand):
    help = (
        "Make the tenants, their quotas and the priority classes as FILE (YAML or JSON, a "
        "`tenants:` list, a `priority_classes:` list) declares them: tenants are found by slug "
        "and classes by name, created if none has it, the fields given set, quotas and the "
        "tenants a class is open to (when given) made exactly those listed. All or nothing; a "
        "line per change."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", metavar="FILE")
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would change; change nothing."
        )
        parser.add_argument(
            "--as", dest="username", metavar="USER",
            help="The user the admin's history records the changes as (default: the first "
            "superuser).",
        )  # fmt: skip

    def handle(self, *args, file, dry_run, username, **options):
        try:
            outcome = declared.apply(declared.read(file), acting_user(username), dry_run=dry_run)
        except declared.Refused as refused:
            raise CommandError(str(refused)) from None
        said = "dry run: " if dry_run else ""
        for line in [*outcome.lines, outcome.summary()]:
            self.stdout.write(said + line)
