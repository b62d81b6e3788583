"""Delete old log lines, released allocations, finished jobs, sign-ins and entries of the
platform's history (what the daily task does)."""

from django.core.management.base import BaseCommand, CommandError

from jobs import retention, scheduler


def days(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


class Command(BaseCommand):
    help = (
        "Delete log lines and released allocations older than --log-days, finished jobs "
        "(with their attempts and events) older than --job-days, sign-ins older than "
        "--sign-in-days and the platform's history (the admin's log entries) older than "
        "--history-days; 0 keeps them. Defaults: MLSCHED_LOG_RETENTION_DAYS (30), "
        "MLSCHED_JOB_RETENTION_DAYS (90), MLSCHED_SIGN_IN_RETENTION_DAYS (365) and "
        "MLSCHED_HISTORY_RETENTION_DAYS (730)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--log-days", type=days, default=None, metavar="N")
        parser.add_argument("--job-days", type=days, default=None, metavar="N")
        parser.add_argument("--sign-in-days", type=days, default=None, metavar="N")
        parser.add_argument("--history-days", type=days, default=None, metavar="N")
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args, log_days, job_days, sign_in_days, history_days, dry_run, **options):
        # The daily task's lock: a run by hand never overlaps it (a dry run deletes nothing).
        with scheduler.single_flight("prune") as acquired:
            if not (acquired or dry_run):
                raise CommandError("a prune is running already: try again once it is done")
            try:
                counts = retention.prune(
                    keep_days=log_days, job_days=job_days, sign_in_days=sign_in_days,
                    history_days=history_days, dry_run=dry_run,
                )  # fmt: skip
            except ValueError as error:  # a bad MLSCHED_*_RETENTION_DAYS
                raise CommandError(str(error)) from error
        verb = "would delete" if dry_run else "deleted"
        for kind, n in counts.items():
            self.stdout.write(f"{verb} {n} {kind.replace('_', ' ')}")
