"""A real Celery worker and beat, over Redis, placing jobs end to end."""

import signal
import sys
import threading
import time

import pytest
import redis
from django.conf import settings

from jobs import scheduler, tasks
from jobs.models import Job
from jobs.states import State
from mlsched_site.celery import app
from quotas.models import Tenant
from tests.factories import ClusterFactory, JobFactory, NodeFactory
from tests.faults.test_database_outage import database_outage
from tests.jobs.test_notify import Receiver
from tests.processes import ROOT, Child, process_env, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def celery(*args):
    return Child(
        [sys.executable, "-m", "celery", "-A", "mlsched_site", *args, "--loglevel", "INFO"],
        cwd=ROOT, env=process_env(), start_new_session=True,
    )  # fmt: skip


def stop(*processes):
    outputs = []
    for process in processes:
        process.send_signal(signal.SIGTERM)
        try:
            outputs.append(process.communicate(timeout=30)[0])
        except Exception:
            process.kill()
            outputs.append(process.communicate()[0])
    return outputs


@pytest.fixture
def queued_jobs():
    cluster = ClusterFactory()
    NodeFactory(cluster=cluster, gpu_count=8)
    return [JobFactory(gpus=2) for _ in range(3)]


def all_scheduled(jobs):
    states = set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True))
    return states == {State.SCHEDULED}


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (make test sets it)")
def test_celery_beat_and_a_worker_place_jobs_through_redis(queued_jobs):
    worker = celery("worker", "--pool", "solo", "--purge", "--without-mingle",
                    "--without-gossip")  # fmt: skip
    beat = celery("beat", "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler",
                  "--schedule", "/dev/null")  # fmt: skip
    try:
        placed = wait_until(lambda: all_scheduled(queued_jobs), timeout=90, interval=0.5)
    finally:
        outputs = stop(beat, worker)

    assert placed, outputs
    assert "jobs.tasks.schedule" in outputs[1]


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (make test sets it)")
def test_a_kick_places_jobs_without_waiting_for_beat(queued_jobs):
    worker = celery("worker", "--pool", "solo", "--purge", "--without-mingle",
                    "--without-gossip")  # fmt: skip
    try:
        assert wait_until(worker_ready, timeout=60), "the worker never answered a ping"
        scheduler.kick()
        placed = wait_until(lambda: all_scheduled(queued_jobs), timeout=60, interval=0.2)
    finally:
        outputs = stop(worker)

    assert placed, outputs


def redis_client():
    return redis.Redis.from_url(settings.REDIS_URL)


def worker_ready():
    return bool(app.control.ping(timeout=0.5))


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (make test sets it)")
def test_kicks_within_the_debounce_window_send_one_task():
    client = redis_client()
    client.delete("mlsched:kick", "celery")

    for _ in range(20):
        scheduler.kick()

    assert client.llen("celery") == 1
    client.delete("celery")


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (make test sets it)")
def test_a_notification_the_worker_runs_while_the_database_is_down_is_sent_once_it_is_back(
    alpha, alice
):
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    Tenant.objects.filter(pk=alpha.pk).update(notify_url=receiver.url)
    ended = JobFactory(tenant=alpha, owner=alice, state=State.FAILED)
    worker = celery("worker", "--pool", "solo", "--purge", "--without-mingle",
                    "--without-gossip")  # fmt: skip
    try:
        assert wait_until(worker_ready, timeout=60), "the worker never answered a ping"
        with database_outage(0.1):
            tasks.notify_job_end.delay(ended.pk)
            time.sleep(3)  # the worker takes it, cannot read the job, and asks again later
            assert receiver.received == []
        sent = wait_until(lambda: receiver.received, timeout=60, interval=0.2)
    finally:
        outputs = stop(worker)
        receiver.shutdown()
        receiver.server_close()

    assert sent, outputs
    assert [post.document["job"] for post in receiver.received] == [ended.pk]
    assert "Retry in" in outputs[0]
