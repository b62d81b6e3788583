"""Job-end notifications: a tenant's webhook hears of each of its jobs' ends (a batch's once),
after commit, signed; a receiver that fails is tried again a bounded number of times, and
nothing it does touches the job. A real HTTP server in a thread plays the receiver."""

import hashlib
import hmac
import json
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from jobs import actions, cycle, notify, tasks
from jobs.models import Attempt, Family, Job
from jobs.states import State
from quotas.models import Tenant
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory
from tests.processes import free_port, wait_until

Outcome = Attempt.Outcome
BATCH = {"name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
         "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60}  # fmt: skip


@dataclass
class Post:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def document(self) -> dict:
        return json.loads(self.body)


class Receiver(ThreadingHTTPServer):
    """A webhook receiver: it records each request and answers `status` (a redirect to
    /elsewhere for a 3xx), once `answering` is set."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.received: list[Post] = []
        self.status = 204
        self.answering = threading.Event()
        self.answering.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/hooks/T0KEN-IN-PATH"


class Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.received.append(Post(self.command, self.path, dict(self.headers), body))
        self.server.answering.wait(10)
        self.send_response(self.server.status)
        if 300 <= self.server.status < 400:
            self.send_header("Location", "/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST  # a redirect followed would come back as a GET

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.answering.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def hooked(alpha, receiver):
    """Alpha, whose notifications go to the receiver."""
    Tenant.objects.filter(pk=alpha.pk).update(notify_url=receiver.url)
    alpha.refresh_from_db()
    return alpha


@pytest.fixture
def queued(monkeypatch):
    """The job ids whose notification was queued; each runs at once."""
    return run_when_sent(monkeypatch, tasks.notify_job_end)


def run_when_sent(monkeypatch, task) -> list[int]:
    """The ids `task` is sent with from now on; each runs at once, as a worker would run it
    (retries included, without their waits)."""
    sent: list[int] = []

    def delay(task_id):
        sent.append(task_id)
        task.apply(args=(task_id,))

    monkeypatch.setattr(task, "delay", delay)
    return sent


@pytest.fixture
def room(db):
    return NodeFactory(gpu_count=8)


def running(tenant, owner, **fields) -> Job:
    """A one-GPU job of `tenant`, placed by the cycle and reported running."""
    job = JobFactory(tenant=tenant, owner=owner, **fields)
    cycle.run_cycle()
    job.refresh_from_db()
    actions.transition(job, State.RUNNING, "started")
    return job


def end(job: Job, outcome: str, **kw) -> None:
    actions.end_attempt(job.attempts.get(outcome="").pk, outcome, **kw)


def batch_of(owner, tenant, shards: int) -> list[Job]:
    spec = {**BATCH, "shards": shards, "priority_class": PriorityClassFactory()}
    first, _ = actions.submit(owner, tenant, spec)
    cycle.run_cycle()
    return list(first.batch())


def verifies(post: Post, secret: str) -> bool:
    """What a receiver does: the signature of the body it got, keyed with the secret."""
    expected = "sha256=" + hmac.new(secret.encode(), post.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(post.headers["X-Mlsched-Signature-256"], expected)


# -- what is sent ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_job_that_succeeds_posts_its_end_signed_with_the_tenants_secret(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks, settings
):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"
    job = running(hooked, alice, name="train-llm", labels={"project": "llm"}, memory_mb=4096)
    began = timezone.now() - timedelta(seconds=100)
    job.attempts.update(worker_ran_at=began, cpu_seconds=200.0, memory_peak_mb=1024)

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.SUCCEEDED, exit_code=0)

    (post,) = receiver.received
    job.refresh_from_db()
    ran = (job.attempts.get().ended_at - began).total_seconds()
    assert (post.method, post.path) == ("POST", "/hooks/T0KEN-IN-PATH")
    assert post.headers["User-Agent"] == "mlsched"
    assert post.headers["Content-Type"] == "application/json"
    assert post.headers["X-Mlsched-Delivery"] == f"job.ended:{job.pk}"
    assert verifies(post, hooked.notify_secret)
    assert post.document == {
        "event": "job.ended", "job": job.pk, "name": "train-llm", "tenant": "alpha",
        "owner": "alice", "labels": {"project": "llm"}, "state": "succeeded",
        "outcome": "succeeded", "exit_code": 0,
        "reason": "exit code 0", "started_at": job.started_at.isoformat(),
        "finished_at": job.finished_at.isoformat(),
        "url": f"https://mlsched.example.com/jobs/{job.pk}/", "shards": None, "shard": None,
        "text": f"Job #{job.pk} train-llm succeeded: exit code 0 "
                f"https://mlsched.example.com/jobs/{job.pk}/",
        "used": {"cpu_seconds": 200.0, "memory_peak_mb": 1024, "memory_efficiency": 0.25,
                 "gpu_busy_seconds": None, "gpu_efficiency": None,
                 "cpu_efficiency": round(200 / ran / (job.cpu_milli / 1000), 3),
                 "runtime_efficiency": round(ran / job.max_runtime_s, 3)},
    }  # fmt: skip


@pytest.mark.django_db
def test_a_signature_made_with_another_secret_does_not_verify(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks
):
    job = running(hooked, alice)

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.SUCCEEDED, exit_code=0)

    (post,) = receiver.received
    assert not verifies(post, Tenant(slug="other").notify_secret)
    assert not verifies(Post("POST", "/", post.headers, post.body + b" "), hooked.notify_secret)


@pytest.mark.django_db
def test_a_job_that_fails_is_reported_failed_with_its_exit_code(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks
):
    job = running(hooked, alice)

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.USER_ERROR, exit_code=3, reason="exit code 3")

    (post,) = receiver.received
    assert {k: post.document[k] for k in ("job", "state", "outcome", "exit_code", "reason")} == {
        "job": job.pk, "state": "failed", "outcome": "user_error", "exit_code": 3,
        "reason": "exit code 3",
    }  # fmt: skip
    assert post.document["url"] is None  # no MLSCHED_PUBLIC_URL


@pytest.mark.django_db
def test_a_job_canceled_before_it_ran_is_reported_with_the_cancels_reason(
    hooked, alice, receiver, queued, django_capture_on_commit_callbacks
):
    job = JobFactory(tenant=hooked, owner=alice)

    with django_capture_on_commit_callbacks(execute=True):
        actions.cancel(job, "canceled by alice")

    (post,) = receiver.received
    assert {k: post.document[k] for k in ("state", "outcome", "exit_code", "reason")} == {
        "state": "canceled",
        "outcome": "",
        "exit_code": None,
        "reason": "canceled by alice",
    }
    assert post.document["started_at"] is None
    assert post.document["used"] is None  # no attempt ran


@pytest.mark.django_db
def test_a_retried_failure_notifies_only_when_the_job_ends(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks
):
    job = running(hooked, alice, max_retries=1)

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.INFRA_ERROR, reason="node lost")
    assert queued == []
    Job.objects.filter(pk=job.pk).update(not_before=None)
    cycle.run_cycle()
    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.INFRA_ERROR, reason="node lost")

    assert queued == [job.pk]
    (post,) = receiver.received
    assert (post.document["state"], post.document["outcome"]) == ("failed", "infra_error")


# -- batches ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_batch_is_reported_once_after_its_last_shard_with_its_shards_by_state(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks
):
    shards = batch_of(alice, hooked, 3)

    with django_capture_on_commit_callbacks(execute=True):
        end(shards[0], Outcome.SUCCEEDED, exit_code=0)
        end(shards[2], Outcome.USER_ERROR, exit_code=137, reason="OOMKilled")
    assert queued == []
    with django_capture_on_commit_callbacks(execute=True):
        end(shards[1], Outcome.SUCCEEDED, exit_code=0)

    assert queued == [shards[0].pk]
    (post,) = receiver.received
    document = post.document
    assert (document["job"], document["state"]) == (shards[0].pk, "failed")
    assert document["shards"] == {"succeeded": 2, "failed": 1}
    assert (document["shard"], document["exit_code"], document["reason"]) == (2, 137, "OOMKilled")
    last = Job.objects.get(pk=shards[1].pk)
    assert document["finished_at"] == last.finished_at.isoformat()


@pytest.mark.django_db
def test_a_batch_whose_shards_all_succeed_is_reported_succeeded(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks
):
    shards = batch_of(alice, hooked, 2)

    with django_capture_on_commit_callbacks(execute=True):
        for shard in shards:
            end(shard, Outcome.SUCCEEDED, exit_code=0)

    (post,) = receiver.received
    assert (post.document["state"], post.document["shards"]) == ("succeeded", {"succeeded": 2})


@pytest.mark.django_db
def test_a_batch_canceled_whole_is_reported_once(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks
):
    shards = batch_of(alice, hooked, 4)

    with django_capture_on_commit_callbacks(execute=True):
        actions.cancel(shards[0], "canceled by alice")

    assert queued == [shards[0].pk]
    (post,) = receiver.received
    assert (post.document["state"], post.document["shards"]) == ("canceled", {"canceled": 4})


@pytest.mark.django_db
def test_the_last_two_shards_ending_in_commits_at_once_notify_once(
    hooked, alice, room, queued, receiver
):
    shards = batch_of(alice, hooked, 2)
    for shard in shards:  # both committed before either commit's hook looks
        end(shard, Outcome.SUCCEEDED, exit_code=0)

    notify.jobs_ended([(shards[1].pk, hooked.pk)])
    notify.jobs_ended([(shards[0].pk, hooked.pk)])

    assert queued == [shards[0].pk]


# -- who is sent nothing --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_tenant_without_a_url_queues_nothing(
    alpha, alice, room, queued, django_capture_on_commit_callbacks
):
    job = running(alpha, alice)

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.USER_ERROR, exit_code=1)

    assert Job.objects.get(pk=job.pk).state == State.FAILED
    assert queued == []


@pytest.mark.django_db
def test_another_tenants_url_hears_nothing_of_this_tenants_jobs(
    hooked, charlie, gamma, room, receiver, queued, django_capture_on_commit_callbacks
):
    job = running(gamma, charlie)

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.SUCCEEDED, exit_code=0)

    assert (queued, receiver.received) == ([], [])


@pytest.mark.django_db
def test_a_url_removed_before_the_task_runs_sends_nothing(hooked, alice, receiver):
    job = JobFactory(tenant=hooked, owner=alice, state=State.SUCCEEDED)
    Tenant.objects.filter(pk=hooked.pk).update(notify_url="")

    tasks.notify_job_end.apply(args=(job.pk,))

    assert receiver.received == []


# -- after commit only ----------------------------------------------------------------------


@pytest.mark.django_db
def test_nothing_is_queued_before_the_end_commits(
    hooked, alice, room, queued, django_capture_on_commit_callbacks
):
    job = running(hooked, alice)

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.SUCCEEDED, exit_code=0)
        assert queued == []

    assert queued == [job.pk]


@pytest.mark.django_db(transaction=True)
def test_an_end_rolled_back_sends_nothing(hooked, alice, room, receiver, queued):
    job = running(hooked, alice)

    with pytest.raises(RuntimeError), transaction.atomic():
        end(job, Outcome.USER_ERROR, exit_code=3)
        raise RuntimeError("the caller's transaction fails after the end")

    assert Job.objects.get(pk=job.pk).state == State.RUNNING
    assert (queued, receiver.received) == ([], [])


@pytest.mark.django_db
def test_a_broker_that_refuses_the_task_does_not_fail_the_end(
    hooked, alice, room, monkeypatch, django_capture_on_commit_callbacks, caplog
):
    job = running(hooked, alice)

    def refused(job_id):
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.notify_job_end, "delay", refused)

    with django_capture_on_commit_callbacks(execute=True):
        end(job, Outcome.SUCCEEDED, exit_code=0)

    assert Job.objects.get(pk=job.pk).state == State.SUCCEEDED
    assert "job-end notifications of 1 job were not queued" in caplog.text


# -- the receiver's answers -----------------------------------------------------------------


@pytest.fixture
def ended(hooked, alice) -> Job:
    return JobFactory(tenant=hooked, owner=alice, state=State.FAILED)


def test_the_retry_policy_is_declared_on_the_task():
    task = tasks.notify_job_end

    assert task.autoretry_for == (notify.Unreachable, OperationalError, InterfaceError)
    assert (task.max_retries, task.retry_backoff, task.retry_backoff_max) == (5, 10, 600)
    assert notify.TIMEOUT_S == (5.0, 5.0)


@pytest.mark.django_db
def test_a_receiver_answering_503_is_tried_again_and_given_up_after_6_tries(ended, receiver):
    receiver.status = 503

    result = tasks.notify_job_end.apply(args=(ended.pk,))

    assert len(receiver.received) == 1 + tasks.notify_job_end.max_retries
    assert isinstance(result.result, notify.Unreachable)
    assert Job.objects.get(pk=ended.pk).state == State.FAILED


@pytest.mark.django_db
def test_every_try_of_a_job_end_carries_the_same_delivery_id_and_body(ended, receiver):
    receiver.status = 503

    tasks.notify_job_end.apply(args=(ended.pk,))

    assert {post.headers["X-Mlsched-Delivery"] for post in receiver.received} == {
        f"job.ended:{ended.pk}"
    }
    assert len({post.body for post in receiver.received}) == 1


@pytest.mark.django_db
def test_a_receiver_answering_400_is_not_tried_again(ended, receiver, caplog):
    receiver.status = 400

    result = tasks.notify_job_end.apply(args=(ended.pk,))

    assert len(receiver.received) == 1
    assert result.successful()
    assert "answered 400; dropped, not sent again" in caplog.text


@pytest.mark.django_db
def test_a_redirect_is_not_followed_nor_tried_again(ended, receiver):
    receiver.status = 302

    tasks.notify_job_end.apply(args=(ended.pk,))

    assert [(post.method, post.path) for post in receiver.received] == [
        ("POST", "/hooks/T0KEN-IN-PATH")
    ]


@pytest.mark.django_db
def test_a_receiver_too_slow_to_answer_is_tried_again(ended, receiver, monkeypatch):
    monkeypatch.setattr(notify, "TIMEOUT_S", (5.0, 0.2))
    monkeypatch.setattr(tasks.notify_job_end, "max_retries", 1)
    receiver.answering.clear()  # it reads the request, then answers nothing

    result = tasks.notify_job_end.apply(args=(ended.pk,))

    assert len(receiver.received) == 2
    assert isinstance(result.result, notify.Unreachable)


@pytest.mark.django_db
def test_an_unreachable_receiver_is_tried_again_and_logged_without_its_urls_path(
    ended, monkeypatch, caplog
):
    url = f"http://127.0.0.1:{free_port()}/hooks/T0KEN-IN-PATH"  # nobody listens there
    Tenant.objects.filter(pk=ended.tenant_id).update(notify_url=url)
    caplog.set_level(logging.INFO)

    result = tasks.notify_job_end.apply(args=(ended.pk,))

    tries = [r for r in caplog.records if r.name == "jobs.notify" and "127.0.0.1" in r.message]
    assert len(tries) == 1 + tasks.notify_job_end.max_retries
    assert isinstance(result.result, notify.Unreachable)
    assert "T0KEN" not in caplog.text
    assert "T0KEN" not in str(result.result) and result.result.__cause__ is None


# -- the embedded mode and a real worker ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_without_a_worker_the_post_runs_beside_the_end_not_inside_it(
    hooked, alice, room, receiver, monkeypatch
):
    monkeypatch.setitem(tasks.notify_job_end.app.conf, "task_always_eager", True)
    receiver.answering.clear()  # the receiver holds the post until the end has returned
    job = running(hooked, alice)

    end(job, Outcome.SUCCEEDED, exit_code=0)
    # Inside the end, its tries (each unanswered past the timeout) would all be in by now.
    assert len(receiver.received) <= 1

    assert wait_until(lambda: receiver.received, timeout=10)
    receiver.answering.set()
    assert [post.document["job"] for post in receiver.received] == [job.pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (make test sets it)")
def test_a_celery_worker_posts_the_notification_sent_through_redis(hooked, alice, room, receiver):
    from tests.faults.test_celery import celery, stop, worker_ready

    worker = celery("worker", "--pool", "solo", "--purge", "--without-mingle",
                    "--without-gossip")  # fmt: skip
    try:
        assert wait_until(worker_ready, timeout=60), "the worker never answered a ping"
        job = running(hooked, alice)
        end(job, Outcome.USER_ERROR, exit_code=2, reason="exit code 2")
        received = wait_until(lambda: receiver.received, timeout=60, interval=0.2)
    finally:
        (output,) = stop(worker)

    assert received, output
    (post,) = received
    assert (post.document["job"], post.document["exit_code"]) == (job.pk, 2)
    assert verifies(post, hooked.notify_secret)
    assert "jobs.tasks.notify_job_end" in output
