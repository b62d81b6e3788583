"""The users' REST API: submit, status, cancel, events and logs, tenant-first."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import pytest
from django.db import connection
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from jobs import dependencies
from jobs.models import Attempt, Job, JobEvent, LogChunk
from jobs.states import State
from quotas.models import Membership
from tests.factories import (
    AttemptFactory,
    JobFactory,
    MembershipFactory,
    PriorityClassFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

SPEC = {
    "tenant": "alpha", "name": "resnet", "family": "training", "image": "pytorch:2",
    "command": ["python", "train.py", "--epochs", "3"], "env": {"LR": "0.1"},
    "cpu_milli": 8000, "memory_mb": 32_000, "gpus": 4, "workers": 2, "max_runtime_s": 3600,
}  # fmt: skip


@pytest.fixture(autouse=True)
def normal_priority():
    return PriorityClassFactory(name="normal", value=0)


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(user, **changes):
    return client_for(user).post("/api/v1/jobs/", {**SPEC, **changes}, format="json")


def test_it_queues_a_submitted_job_with_its_first_event(alice):
    response = submit(alice)

    assert response.status_code == 201
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.state, job.workers, job.gpus, job.owner) == (State.QUEUED, 2, 4, alice)
    assert job.preemptible is False  # training is not preemptible unless it says so
    assert list(job.events.values_list("from_state", "to_state")) == [("", State.QUEUED)]


def test_it_refuses_anonymous_callers(db):
    response = APIClient().post("/api/v1/jobs/", SPEC, format="json")

    assert response.status_code in (401, 403)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cpu_milli": 0}, "cpu_milli"),
        ({"command": []}, "command"),
        ({"family": "mining"}, "family"),
        ({"gpu_milli": 500}, "gpu_milli"),  # training with a GPU share
        ({"family": "evaluation", "gpus": 1, "gpu_milli": 500}, "gpu_milli"),
        ({"family": "evaluation", "workers": 2}, "workers"),
        ({"priority_class": "urgent"}, "priority_class"),
        ({"tenant": "gamma"}, "tenant"),
        ({"max_runtime_s": None}, "max_runtime_s"),
        ({"env": {"A\x00B": "x"}}, "env"),  # PostgreSQL cannot store NUL
        ({"env": {"1LR": "x"}}, "env"),
        ({"env": {"LR=2": "x"}}, "env"),
        ({"env": {"LR": "0.1\x00"}}, "env"),
        ({"cluster_selector": {"zone\x00": "a"}}, "cluster_selector"),
        ({"cluster_selector": {"my zone": "a"}}, "cluster_selector"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(alice, gamma, changes, field):
    response = submit(alice, **changes)

    assert response.status_code == 400
    assert field in response.json()
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()


def test_environment_values_are_kept_as_given(alice):
    response = submit(alice, env={"PROMPT": "  two leading spaces", "EMPTY": ""})

    job = Job.objects.get(pk=response.json()["id"])
    assert job.env == {"PROMPT": "  two leading spaces", "EMPTY": ""}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("env", {f"V{i}": "x" * 9000 for i in range(15)}),  # 135,000 characters
        ("command", ["python", *["y" * 9000] * 15]),
    ],
)
def test_a_command_or_environment_over_128_kib_in_all_is_a_400_naming_it(alice, field, value):
    response = submit(alice, **{field: value})

    assert response.status_code == 400
    assert "128 KiB" in str(response.json()[field])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("", "state=done"),
        ("", "state=queued%00"),  # PostgreSQL cannot compare with NUL: it was a 500
        ("", "before=abc"),
        ("", "before=%C2%B2"),  # a digit to str.isdigit, not to int()
        ("logs/", "after=abc"),  # it was a 500 on a job without logs
    ],
)
def test_a_malformed_query_parameter_is_a_400_naming_it(alice, path, param):
    job = submit(alice).json()["id"]
    url = f"/api/v1/jobs/{job}/{path}" if path else "/api/v1/jobs/"

    response = client_for(alice).get(f"{url}?{param}")

    assert response.status_code == 400
    assert param.split("=")[0] in response.json()


def test_a_missing_field_is_named(alice):
    spec = {k: v for k, v in SPEC.items() if k != "image"}

    response = client_for(alice).post("/api/v1/jobs/", spec, format="json")

    assert response.status_code == 400
    assert "image" in response.json()


def test_a_field_no_submission_has_is_a_400_naming_it_and_the_one_meant(alice):
    response = submit(alice, max_running_shard=10, colour="blue")

    assert response.status_code == 400
    assert response.json() == {
        "max_running_shard": ["There is no field 'max_running_shard' here. Did you mean "
                              "'max_running_shards'?"],
        "colour": ["There is no field 'colour' here."],
    }  # fmt: skip
    assert not Job.objects.exists()


def test_a_field_named_with_a_lone_surrogate_is_refused_escaped(alice):
    body = json.dumps({**SPEC, "\ud800x": 1}).encode()  # json.dumps escapes the surrogate

    response = client_for(alice).post("/api/v1/jobs/", body, content_type="application/json")

    assert response.status_code == 400
    assert list(response.json()) == ["\\ud800x"]


def test_a_viewer_cannot_submit(alpha):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)

    response = submit(viewer)

    assert response.status_code == 400
    assert "tenant" in response.json()


def test_the_same_idempotency_key_gives_the_same_job(alice):
    first = submit(alice, idempotency_key="nightly-42")
    second = submit(alice, idempotency_key="nightly-42")

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_submissions_with_one_idempotency_key_give_one_job(alice):
    # Hold each request after its check for an existing job until both have checked: both
    # insert, as two clients retrying at once can (one after the other: submissions of one
    # name take turns), and the unique constraint decides.
    both_checked = threading.Barrier(2, timeout=10)
    take_turn = dependencies.take_turn

    def take_turn_once_both_checked(*group):
        both_checked.wait()
        return take_turn(*group)

    def post(_):
        client = client_for(alice)
        client.raise_request_exception = False  # a 500 is a response here, not an exception
        try:
            return client.post("/api/v1/jobs/", {**SPEC, "idempotency_key": "nightly-42"},
                               format="json")  # fmt: skip
        finally:
            connection.close()

    with (
        mock.patch.object(dependencies, "take_turn", take_turn_once_both_checked),
        ThreadPoolExecutor(2) as pool,
    ):
        responses = list(pool.map(post, range(2)))

    assert sorted(r.status_code for r in responses) == [200, 201]
    assert responses[0].json()["id"] == responses[1].json()["id"]
    assert Job.objects.count() == 1


def test_evaluation_jobs_may_ask_for_a_gpu_share_and_are_preemptible(alice):
    response = submit(alice, family="evaluation", gpus=0, gpu_milli=250, workers=1)

    assert response.status_code == 201
    assert (response.json()["gpu_milli"], response.json()["preemptible"]) == (250, True)


def test_a_team_mate_sees_the_job_in_the_list_and_in_detail(alice, bob):
    job_id = submit(alice).json()["id"]

    listing = client_for(bob).get("/api/v1/jobs/").json()["jobs"]
    detail = client_for(bob).get(f"/api/v1/jobs/{job_id}/")

    assert [j["id"] for j in listing] == [job_id]
    assert detail.status_code == 200
    assert detail.json()["state"] == State.QUEUED


@pytest.mark.parametrize("suffix", ["", "cancel/", "events/", "logs/"])
def test_another_tenants_job_is_a_404(alice, charlie, suffix):
    job_id = submit(alice).json()["id"]
    client = client_for(charlie)

    response = (client.post if suffix == "cancel/" else client.get)(
        f"/api/v1/jobs/{job_id}/{suffix}"
    )

    assert response.status_code == 404
    assert Job.objects.get(pk=job_id).state == State.QUEUED


def test_another_tenants_jobs_are_not_listed(alice, charlie):
    submit(alice)

    assert client_for(charlie).get("/api/v1/jobs/").json()["jobs"] == []


def test_a_job_shared_with_view_permission_is_visible_but_not_cancelable(alice, charlie):
    job = Job.objects.get(pk=submit(alice).json()["id"])
    assign_perm("jobs.view_job", charlie, job)

    detail = client_for(charlie).get(f"/api/v1/jobs/{job.pk}/")
    cancel = client_for(charlie).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert detail.status_code == 200
    assert cancel.status_code == 403
    job.refresh_from_db()
    assert job.state == State.QUEUED


def test_a_cancel_permission_on_one_job_lets_an_outsider_cancel_it(alice, charlie):
    job = Job.objects.get(pk=submit(alice).json()["id"])
    assign_perm("jobs.view_job", charlie, job)
    assign_perm("jobs.cancel_job", charlie, job)

    response = client_for(charlie).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert response.status_code == 202
    assert response.json()["state"] == State.CANCELED


def test_cancel_of_a_running_job_asks_its_attempt_to_stop(alice, bob, alpha):
    job = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING)
    attempt = AttemptFactory(job=job)

    response = client_for(bob).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert response.status_code == 202
    attempt.refresh_from_db()
    assert attempt.stop_reason == Attempt.Outcome.CANCELED


def test_cancel_of_an_ended_job_is_a_409(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED)

    response = client_for(alice).post(f"/api/v1/jobs/{job.pk}/cancel/")

    assert response.status_code == 409
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED


def test_logs_page_by_the_last_id_seen(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice)
    attempt = AttemptFactory(job=job)
    for seq in range(3):
        LogChunk.objects.create(attempt=attempt, seq=seq, text=f"line {seq}")
    client = client_for(alice)

    first = client.get(f"/api/v1/jobs/{job.pk}/logs/").json()
    LogChunk.objects.create(attempt=attempt, seq=3, text="line 3")
    rest = client.get(f"/api/v1/jobs/{job.pk}/logs/?after={first['next']}").json()

    assert [line["text"] for line in first["lines"]] == ["line 0", "line 1", "line 2"]
    assert [line["text"] for line in rest["lines"]] == ["line 3"]


def test_logs_give_the_last_lines_after_the_last_id_seen_and_say_if_some_were_left_out(
    alice, alpha
):
    job = JobFactory(tenant=alpha, owner=alice)
    attempt = AttemptFactory(job=job)
    LogChunk.objects.bulk_create(
        LogChunk(attempt=attempt, seq=seq, text=f"line {seq}") for seq in range(10)
    )
    ids = list(LogChunk.objects.order_by("pk").values_list("pk", flat=True))
    client = client_for(alice)

    tail = client.get(f"/api/v1/jobs/{job.pk}/logs/?last=3").json()
    whole = client.get(f"/api/v1/jobs/{job.pk}/logs/?after={ids[5]}&last=4").json()
    none = client.get(f"/api/v1/jobs/{job.pk}/logs/?after={ids[-1]}&last=4").json()

    assert [line["text"] for line in tail["lines"]] == ["line 7", "line 8", "line 9"]
    assert (tail["next"], tail["earlier"]) == (ids[-1], True)
    assert [line["text"] for line in whole["lines"]] == [f"line {n}" for n in range(6, 10)]
    assert whole["earlier"] is False
    assert none == {"lines": [], "next": ids[-1], "earlier": False}


@pytest.mark.parametrize("last", ["0", "5001", "x", "-1"])
def test_a_tail_of_no_lines_or_too_many_is_a_400_naming_last(alice, alpha, last):
    job = JobFactory(tenant=alpha, owner=alice)

    response = client_for(alice).get(f"/api/v1/jobs/{job.pk}/logs/?last={last}")

    assert response.status_code == 400 and "last" in response.json()


def test_events_list_the_jobs_transitions(alice):
    job_id = submit(alice).json()["id"]
    client_for(alice).post(f"/api/v1/jobs/{job_id}/cancel/")

    events = client_for(alice).get(f"/api/v1/jobs/{job_id}/events/").json()["events"]

    assert [(e["from_state"], e["to_state"]) for e in events] == [
        ("", State.QUEUED), (State.QUEUED, State.CANCELED)]  # fmt: skip


def test_the_last_events_are_the_newest_oldest_first_saying_whether_more_came_before(alice):
    job_id = submit(alice).json()["id"]
    client_for(alice).post(f"/api/v1/jobs/{job_id}/hold/")
    client_for(alice).post(f"/api/v1/jobs/{job_id}/cancel/")
    every = client_for(alice).get(f"/api/v1/jobs/{job_id}/events/").json()
    assert len(every["events"]) == 3 and every["earlier"] is False

    last = client_for(alice).get(f"/api/v1/jobs/{job_id}/events/?last=2").json()
    whole = client_for(alice).get(f"/api/v1/jobs/{job_id}/events/?last=3").json()

    assert last == {"events": every["events"][1:], "earlier": True}
    assert whole == {"events": every["events"], "earlier": False}


@pytest.mark.parametrize("last", ["0", "1001", "x", "-1", ""])
def test_a_read_of_no_events_or_too_many_is_a_400_naming_last(alice, alpha, last):
    job = JobFactory(tenant=alpha, owner=alice)

    response = client_for(alice).get(f"/api/v1/jobs/{job.pk}/events/?last={last}")

    assert response.status_code == 400 and "last" in response.json()


def test_a_batch_inference_shard_of_several_workers_is_a_400_naming_workers(alice):
    response = submit(alice, family="batch_inference", workers=2, gpus=1, shards=4)

    assert response.status_code == 400 and "workers" in response.json()
    assert not Job.objects.exists()


def test_a_batch_job_becomes_one_job_per_shard(alice):
    response = submit(alice, family="batch_inference", workers=1, gpus=1, shards=4)

    assert response.status_code == 201
    first = Job.objects.get(pk=response.json()["id"])
    shards = Job.objects.filter(tenant=first.tenant).order_by("shard_index")
    assert [(j.shard_index, j.parent_id) for j in shards] == [
        (0, None), (1, first.pk), (2, first.pk), (3, first.pk)]  # fmt: skip
    assert JobEvent.objects.filter(to_state=State.QUEUED).count() == 4


def test_only_batch_inference_has_shards(alice):
    response = submit(alice, shards=3)

    assert response.status_code == 400
    assert "shards" in response.json()


def test_past_the_api_rate_a_user_gets_429_with_retry_after_and_others_do_not(
    alice, charlie, settings
):
    settings.MLSCHED_API_RATE = "3/minute"
    client = client_for(alice)

    codes = [client.get("/api/v1/jobs/").status_code for _ in range(4)]

    assert codes == [200, 200, 200, 429]
    throttled = client.get("/api/v1/jobs/")
    assert 0 < int(throttled["Retry-After"]) <= 60
    assert "throttled" in throttled.json()["detail"]
    assert client_for(charlie).get("/api/v1/jobs/").status_code == 200


def test_a_tenants_members_share_its_submit_rate_and_other_tenants_do_not(
    alice, bob, charlie, settings
):
    settings.MLSCHED_TENANT_SUBMIT_RATE = "3/minute"
    outsider = [submit(charlie, name="not-yours").status_code for _ in range(3)]  # alpha's slug

    codes = [submit(user, name=f"run-{i}").status_code
             for i, user in enumerate([alice, bob, alice, bob])]  # fmt: skip

    assert outsider == [400] * 3  # refused, and none of alpha's budget used
    assert codes == [201, 201, 201, 429]
    assert submit(charlie, tenant="gamma").status_code == 201


def test_a_malformed_tenant_is_a_400_not_an_error_of_the_tenant_rate(alice):
    response = submit(alice, tenant="al\x00pha")

    assert response.status_code == 400 and "tenant" in response.json()


def test_past_the_submit_rate_a_submission_is_refused_and_writes_nothing(alice, settings):
    settings.MLSCHED_SUBMIT_RATE = "2/minute"

    codes = [submit(alice, name=f"run-{i}").status_code for i in range(3)]

    assert codes == [201, 201, 429]
    assert Job.objects.count() == 2
    assert client_for(alice).get("/api/v1/jobs/").status_code == 200  # reading still works
