"""Carry DRF's plain-text tokens (rest_framework.authtoken, no longer installed) over as hashed
API tokens named "migrated", so the CLI keeps working with the key it has, then delete them.

The authtoken app is gone from the migration state, so its table is read with SQL, and only
where it exists: a fresh database never had one. Not reversible: the keys are gone.
"""

import hashlib
from datetime import UTC

from django.db import migrations
from django.utils import timezone
from django.utils.dateparse import parse_datetime

OLD_TABLE = "authtoken_token"


def aware(value):
    """The old row's creation time: SQLite may hand back text, or a naive UTC time."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is None:
        return timezone.now()
    return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)


def carry_over_authtokens(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if OLD_TABLE not in connection.introspection.table_names(cursor):
            return
        cursor.execute(f"SELECT key, user_id, created FROM {OLD_TABLE}")
        rows = cursor.fetchall()
    ApiToken = apps.get_model("quotas", "ApiToken")
    ApiToken.objects.bulk_create(
        ApiToken(
            user_id=user_id,
            name="migrated",
            prefix=key[:12],
            key_hash=hashlib.sha256(key.encode()).hexdigest(),
            created=aware(created),
        )
        for key, user_id, created in rows
    )
    # The plain-text keys go: keeping them would keep the leak this change closes.
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {OLD_TABLE}")


class Migration(migrations.Migration):

    dependencies = [
        ("quotas", "0004_api_token"),
    ]

    operations = [
        migrations.RunPython(carry_over_authtokens, migrations.RunPython.noop),
    ]
