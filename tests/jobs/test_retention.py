"""Retention (jobs.retention.prune, manage.py prune, the daily task): old log lines, released
allocations and finished jobs go; recent ones and everything of live work stay."""

import threading
import zlib
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.db.models import ProtectedError
from django.utils import timezone
from guardian.models import UserObjectPermission
from guardian.shortcuts import assign_perm

from clusters.models import Allocation, Node
from jobs import retention, scheduler, tasks
from jobs.models import Attempt, BudgetAlert, Job, JobEvent, LogChunk
from jobs.states import State
from tests.factories import AttemptFactory, JobFactory, NodeFactory, UserFactory
from tests.jobs.test_lock_order import other_connection

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome
NOW = timezone.now()
LINES = 3


def ago(days: float):
    return NOW - timedelta(days=days)


@pytest.fixture
def node():
    return NodeFactory()


def finished_job(node, days: float, state=State.SUCCEEDED, **fields) -> Job:
    """A job that ended `days` ago: one ended attempt with a released GPU, three log lines and
    two events."""
    end = ago(days)
    job = JobFactory(
        state=state, created=end - timedelta(hours=2), started_at=end - timedelta(hours=1),
        finished_at=end, **fields,
    )  # fmt: skip
    attempt = AttemptFactory(
        job=job, cluster=node.cluster, outcome=Outcome.SUCCEEDED, scheduled_at=job.created,
        started_at=job.started_at, ended_at=end,
    )  # fmt: skip
    hold(attempt, node, released=end)
    write_lines(attempt, created=end)
    JobEvent.objects.create(job=job, to_state=State.QUEUED, time=job.created)
    JobEvent.objects.create(job=job, attempt=attempt, from_state=State.RUNNING, to_state=state,
                            time=end)  # fmt: skip
    return job


def live_job(node, days: float, state=State.RUNNING) -> Job:
    """A job submitted `days` ago whose attempt still runs, holding a GPU."""
    job = JobFactory(state=state, created=ago(days), started_at=ago(days))
    attempt = AttemptFactory(job=job, cluster=node.cluster, scheduled_at=ago(days),
                             started_at=ago(days))  # fmt: skip
    hold(attempt, node, released=None, gpu=1)
    write_lines(attempt, created=ago(days))
    JobEvent.objects.create(job=job, attempt=attempt, to_state=State.RUNNING, time=ago(days))
    return job


def hold(attempt, node, released, gpu: int = 0) -> Allocation:
    return Allocation.objects.create(
        attempt=attempt, node=node, gpu_index=gpu, gpu_milli=1000, cpu_milli=1000, memory_mb=100,
        active=released is None, released=released, created=attempt.scheduled_at,
    )  # fmt: skip


def write_lines(attempt, created) -> None:
    LogChunk.objects.bulk_create(
        LogChunk(attempt=attempt, seq=i, text=f"line {i}", created=created) for i in range(LINES)
    )


def kept(job) -> dict[str, int]:
    """What is left of the job, by kind."""
    attempts = Attempt.objects.filter(job=job)
    return {
        "job": Job.objects.filter(pk=job.pk).count(),
        "attempts": attempts.count(),
        "events": JobEvent.objects.filter(job=job).count(),
        "log_lines": LogChunk.objects.filter(attempt__in=attempts).count(),
        "allocations": Allocation.objects.filter(attempt__in=attempts).count(),
    }


WHOLE = {"job": 1, "attempts": 1, "events": 2, "log_lines": LINES, "allocations": 1}
LIVE = {"job": 1, "attempts": 1, "events": 1, "log_lines": LINES, "allocations": 1}
GONE = dict.fromkeys(WHOLE, 0)


def test_it_deletes_log_lines_and_released_allocations_past_the_log_retention(node):
    old, recent = finished_job(node, days=40), finished_job(node, days=10)

    counts = retention.prune(NOW, keep_days=30, job_days=0)

    assert counts == {"log_lines": LINES, "allocations": 1, "jobs": 0, "attempts": 0, "events": 0,
                      "budget_alerts": 0, "sign_ins": 0, "history": 0}  # fmt: skip
    assert kept(old) == {**WHOLE, "log_lines": 0, "allocations": 0}
    assert kept(recent) == WHOLE


def test_it_deletes_finished_jobs_past_the_job_retention_with_all_they_have(node):
    old, middle = finished_job(node, days=100), finished_job(node, days=40)

    counts = retention.prune(NOW, keep_days=30, job_days=90)

    assert kept(old) == GONE
    assert kept(middle) == {**WHOLE, "log_lines": 0, "allocations": 0}
    assert counts == {"log_lines": 2 * LINES, "allocations": 2, "jobs": 1, "attempts": 1,
                      "events": 2, "budget_alerts": 0, "sign_ins": 0, "history": 0}  # fmt: skip


def test_with_the_log_pass_off_a_deleted_job_still_takes_its_log_lines(node):
    old = finished_job(node, days=100)

    counts = retention.prune(NOW, keep_days=0, job_days=90)

    assert kept(old) == GONE
    assert counts == {"log_lines": LINES, "allocations": 1, "jobs": 1, "attempts": 1, "events": 2,
                      "budget_alerts": 0, "sign_ins": 0, "history": 0}  # fmt: skip


@pytest.mark.parametrize("state", [State.QUEUED, State.SCHEDULED, State.RUNNING])
def test_it_never_touches_live_work_however_old(node, state):
    job = live_job(node, days=200, state=state)
    queued_long_ago = JobFactory(state=State.QUEUED, created=ago(200))

    counts = retention.prune(NOW, keep_days=1, job_days=1)

    assert kept(job) == LIVE
    assert kept(queued_long_ago)["job"] == 1
    assert set(counts.values()) == {0}


def test_a_canceled_job_whose_attempt_still_stops_is_kept(node):
    # Canceled 200 days ago, but its agent never saw the stop through: its worker may still run.
    job = live_job(node, days=200)
    Job.objects.filter(pk=job.pk).update(state=State.CANCELED, finished_at=ago(200))
    Attempt.objects.filter(job=job).update(stop_requested_at=ago(200), stop_reason="canceled")

    retention.prune(NOW, keep_days=1, job_days=1)

    assert kept(job) == LIVE


def test_a_job_whose_last_attempt_ended_recently_is_kept(node):
    # Canceled long ago; its attempt ended (the agent confirmed the stop) only yesterday.
    job = finished_job(node, days=100, state=State.CANCELED)
    Attempt.objects.filter(job=job).update(ended_at=ago(1))
    Allocation.objects.filter(attempt__job=job).update(released=ago(1))

    retention.prune(NOW, keep_days=30, job_days=90)

    assert kept(job) == WHOLE


def shards(node, root_days: float, *shard_days: float | None) -> list[Job]:
    """A batch: shard 0 ended root_days ago; the others ended shard_days ago (None: running)."""
    root = finished_job(node, root_days, family="batch_inference", shards=1 + len(shard_days),
                        shard_index=0)  # fmt: skip
    batch = [root]
    for index, days in enumerate(shard_days, start=1):
        fields = {"parent": root, "shard_index": index, "family": "batch_inference"}
        if days is None:
            shard = live_job(node, 200)
            Job.objects.filter(pk=shard.pk).update(**fields)
        else:
            shard = finished_job(node, days, **fields)
        batch.append(shard)
    return batch


def test_a_batch_goes_only_when_every_shard_qualifies(node):
    gone = shards(node, 100, 120, 95)
    one_recent = shards(node, 100, 120, 10)
    recent_first = shards(node, 10, 120, 100)
    one_live = shards(node, 100, None, 120)

    counts = retention.prune(NOW, keep_days=0, job_days=90)

    assert [kept(job)["job"] for job in gone] == [0, 0, 0]
    assert [kept(job) for job in one_recent] == [WHOLE] * 3
    assert [kept(job) for job in recent_first] == [WHOLE] * 3
    assert [kept(job) for job in one_live] == [WHOLE, LIVE, WHOLE]
    assert counts["jobs"] == 3


def test_it_works_in_batches_and_a_second_run_finds_nothing(node):
    jobs = [finished_job(node, days=100) for _ in range(5)] + shards(node, 100, 100, 100, 100)

    counts = retention.prune(NOW, keep_days=30, job_days=90, batch=2)

    assert counts == {"log_lines": 9 * LINES, "allocations": 9, "jobs": 9, "attempts": 9,
                      "events": 18, "budget_alerts": 0, "sign_ins": 0, "history": 0}  # fmt: skip
    assert [kept(job) for job in jobs] == [GONE] * 9
    assert set(retention.prune(NOW, keep_days=30, job_days=90, batch=2).values()) == {0}


def test_a_dry_run_deletes_nothing_and_counts_what_a_run_deletes(node):
    jobs = [finished_job(node, 100), finished_job(node, 40), finished_job(node, 10)]
    jobs += shards(node, 100, 95) + shards(node, 100, 10) + [live_job(node, 200)]
    before = [kept(job) for job in jobs]

    would = retention.prune(NOW, keep_days=30, job_days=90, dry_run=True)

    assert [kept(job) for job in jobs] == before
    assert would == retention.prune(NOW, keep_days=30, job_days=90)
    assert would["jobs"] == 3


def test_zero_days_in_the_settings_switches_each_pass_off(node, settings):
    settings.MLSCHED_LOG_RETENTION_DAYS = 0
    settings.MLSCHED_JOB_RETENTION_DAYS = 0
    job = finished_job(node, days=1000)  # its roll-up: a quiet stretch but for its own day

    assert set(retention.prune(NOW).values()) == {0}
    assert kept(job) == WHOLE

    settings.MLSCHED_LOG_RETENTION_DAYS = 30
    assert retention.prune(NOW)["log_lines"] == LINES
    assert kept(job)["job"] == 1

    settings.MLSCHED_JOB_RETENTION_DAYS = 90
    assert retention.prune(NOW)["jobs"] == 1


def test_the_defaults_are_30_and_90_days_and_a_negative_setting_is_refused(settings):
    assert retention.retention_days("MLSCHED_LOG_RETENTION_DAYS") == 30
    assert retention.retention_days("MLSCHED_JOB_RETENTION_DAYS") == 90
    settings.MLSCHED_JOB_RETENTION_DAYS = -1
    with pytest.raises(ValueError):
        retention.retention_days("MLSCHED_JOB_RETENTION_DAYS")


def test_a_deleted_job_takes_its_object_permissions_along(node):
    job = finished_job(node, days=100)
    assign_perm("jobs.view_job", UserFactory(), job)

    retention.prune(NOW, keep_days=30, job_days=90)

    assert not UserObjectPermission.objects.filter(object_pk=str(job.pk)).exists()


def test_a_node_with_only_released_allocations_can_be_deleted_after_prune(node):
    finished_job(node, days=40)

    retention.prune(NOW, keep_days=30, job_days=0)
    node.delete()

    assert not Node.objects.filter(pk=node.pk).exists()


def test_a_drained_node_can_be_deleted_at_once_taking_its_released_rows(node):
    job = finished_job(node, days=1)

    node.delete()

    assert kept(job) == {**WHOLE, "allocations": 0}


def test_a_node_holding_a_live_allocation_cannot_be_deleted(node):
    job = live_job(node, days=1)
    finished_job(node, days=1)

    with pytest.raises(ProtectedError):
        node.delete()
    assert Node.objects.filter(pk=node.pk).exists()
    assert kept(job) == LIVE
    assert Allocation.objects.filter(node=node).count() == 2


def test_the_command_prints_the_counts_and_its_dry_run_deletes_nothing(node):
    job = finished_job(node, days=100)
    out = StringIO()

    call_command("prune", "--dry-run", "--job-days", "90", "--log-days", "30", stdout=out)

    assert "would delete 1 jobs" in out.getvalue()
    assert f"would delete {LINES} log lines" in out.getvalue()
    assert kept(job) == WHOLE

    out = StringIO()
    call_command("prune", "--job-days", "90", stdout=out)
    assert "deleted 1 jobs" in out.getvalue()
    assert kept(job) == GONE


def test_the_daily_task_prunes_with_the_settings(node, settings):
    settings.MLSCHED_LOG_RETENTION_DAYS = 30
    settings.MLSCHED_JOB_RETENTION_DAYS = 90
    old, middle = finished_job(node, days=100), finished_job(node, days=40)

    tasks.prune()

    assert kept(old) == GONE
    assert kept(middle)["log_lines"] == 0
    assert django_settings.CELERY_BEAT_SCHEDULE["prune"]["task"] == "jobs.tasks.prune"


def test_the_admin_deletes_a_drained_node_with_its_released_rows_but_not_a_busy_one(
    admin_client, node
):
    busy = NodeFactory(cluster=node.cluster)
    finished_job(node, days=1)
    live_job(busy, days=1)

    assert admin_client.get(f"/admin/clusters/node/{busy.pk}/delete/").context["protected"]
    page = admin_client.get(f"/admin/clusters/node/{node.pk}/delete/")
    assert (page.context["perms_lacking"], page.context["protected"]) == (set(), [])
    assert (
        admin_client.post(f"/admin/clusters/node/{node.pk}/delete/", {"post": "yes"}).status_code
        == 302
    )
    assert list(Node.objects.all()) == [busy]
    assert Allocation.objects.filter(node=busy).count() == 1


class Once(threading.Event):
    """A stop event that is set as soon as the loop first waits: one turn of the loop."""

    def wait(self, timeout=None):
        self.set()
        return True


@pytest.mark.django_db(transaction=True)
def test_the_embedded_mode_prunes_at_start_and_then_daily(node, settings):
    settings.MLSCHED_JOB_RETENTION_DAYS = 90
    old = finished_job(node, days=100)

    scheduler.prune_forever(Once())

    assert kept(old) == GONE


def test_a_prune_by_hand_refuses_to_overlap_a_running_one(node):
    old = finished_job(node, days=100)
    other = other_connection()
    key = zlib.crc32(b"mlsched-cycle:prune")
    other.execute("SELECT pg_advisory_lock(%s)", [key])
    try:
        with pytest.raises(CommandError, match="running already"):
            call_command("prune", "--job-days", "90", stdout=StringIO())
        call_command("prune", "--dry-run", "--job-days", "90", stdout=StringIO())
    finally:
        other.close()

    assert kept(old) == WHOLE


def test_budget_alerts_of_months_before_the_cutoffs_go_and_the_months_since_stay(alpha):
    def sent(month):
        return BudgetAlert.objects.create(tenant=alpha, month=month, percent=80,
                                          budget_gpu_hours=100, spent_gpu_hours=80.0)  # fmt: skip

    cutoff = (NOW - timedelta(days=90)).date()
    before = sent((cutoff.replace(day=1) - timedelta(days=1)).replace(day=1))
    cutoffs = sent(cutoff.replace(day=1))
    this = sent(NOW.date().replace(day=1))

    assert retention.prune(NOW, keep_days=30, job_days=90, dry_run=True)["budget_alerts"] == 1
    assert retention.prune(NOW, keep_days=30, job_days=90)["budget_alerts"] == 1
    left = set(BudgetAlert.objects.values_list("pk", flat=True))
    assert left == {cutoffs.pk, this.pk} and before.pk not in left
    again = sent(before.month)
    assert retention.prune(NOW, keep_days=30, job_days=0)["budget_alerts"] == 0  # kept forever
    assert BudgetAlert.objects.filter(pk=again.pk).exists()
