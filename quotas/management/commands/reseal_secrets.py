"""`manage.py reseal_secrets`: seal every tenant's secret anew under the first key of
MLSCHED_SECRETS_KEYS, so an older key can then be dropped from the list.

A secret no key opens is left as it is and named: its tenant's owners set it again.
"""

from django.core.management.base import BaseCommand
from django.db import transaction

from jobs.placement.words import counted
from quotas import vault
from quotas.models import TenantSecret


class Command(BaseCommand):
    help = "Seal every tenant's secret under the first key of MLSCHED_SECRETS_KEYS."

    def handle(self, *args, **options):
        resealed, unreadable = 0, []
        for pk in TenantSecret.objects.order_by("pk").values_list("pk", flat=True):
            with transaction.atomic():
                secret = TenantSecret.objects.select_for_update().select_related("tenant")
                secret = secret.get(pk=pk)
                try:
                    secret.sealed = vault.reseal(secret.sealed)
                except vault.Unreadable:
                    unreadable.append(f"{secret.tenant.slug}/{secret.name}")
                    continue
                secret.save(update_fields=["sealed"])
                resealed += 1
        self.stdout.write(f"resealed {counted(resealed, 'secret')}")
        if unreadable:
            self.stderr.write(f"no key opens: {', '.join(unreadable)}")
