from django.db import migrations, models
from django.db.models import Q

# The stop messages each verb wrote before the cause was stored (actions.requeue, actions.drain,
# janitor.stop_for_maintenance); any other preempted attempt was the scheduler's preemption.
CAUSES = [
    ("requeue", Q(reason__startswith="requeued by ")),
    ("drain", Q(reason__startswith="node drained by ")),
    ("maintenance", Q(reason__startswith="maintenance of ")),
    ("booking", Q(reason__startswith="nodes of ", reason__contains=" booked for another team")),
]


def name_stop_causes(apps, schema_editor):
    """Attempts asked to stop as preempted before the cause was stored: read it off the
    message their stop wrote."""
    Attempt = apps.get_model("jobs", "Attempt")
    preempted = Attempt.objects.filter(Q(stop_reason="preempted") | Q(outcome="preempted"))
    for cause, written in CAUSES:
        preempted.filter(written, stop_cause="").update(stop_cause=cause)
    preempted.filter(stop_cause="").update(stop_cause="preemption")


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0028_job_max_running_shards"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="stop_cause",
            field=models.CharField(
                blank=True,
                choices=[
                    ("preemption", "Preemption"),
                    ("requeue", "Requeue"),
                    ("drain", "Drain"),
                    ("maintenance", "Maintenance"),
                    ("booking", "Booking"),
                ],
                db_default="",
                default="",
                help_text="Who asked the attempt to stop as preempted, set with the stop request (empty: nobody).",
                max_length=12,
            ),
        ),
        migrations.RunPython(name_stop_causes, migrations.RunPython.noop),
    ]
