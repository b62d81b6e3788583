"""The agents' API: token scoping, validation, the desired state, reports moving jobs."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from clusters import agents
from clusters.backends import base
from clusters.models import Allocation, Cluster, Node
from jobs import actions, cycle
from jobs.models import Attempt, Job, LogChunk
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


def post(client, cluster, what, payload):
    return client.post(f"/api/v1/agent/{cluster}/{what}/", payload, format="json")


def report(attempt, *phases, codes=None):
    codes = codes or [None] * len(phases)
    return [{"attempt_id": attempt.pk, "rank": r, "phase": p, "exit_code": c, "reason": ""}
            for r, (p, c) in enumerate(zip(phases, codes, strict=True))]  # fmt: skip


def test_it_refuses_a_missing_token(east):
    response = post(APIClient(), "east", "heartbeat", {"workers": []})

    assert response.status_code in (401, 403)


def test_it_refuses_a_token_of_another_cluster(agent, east):
    ClusterFactory(name="west")

    response = post(agent, "west", "heartbeat", {"workers": []})

    assert response.status_code == 401


def test_it_registers_the_reported_nodes_and_marks_missing_ones_unhealthy(agent, east):
    NodeFactory(cluster=east, name="gone")
    nodes = [{"name": "east-0", "cpu_milli": 64000, "memory_mb": 512000, "gpu_type": "A100",
              "gpu_count": 8, "topology": {"rack": "r1"}}]  # fmt: skip

    response = post(agent, "east", "inventory", {"nodes": nodes})

    assert response.status_code == 200
    node = Node.objects.get(cluster=east, name="east-0")
    assert (node.gpu_count, node.topology, node.healthy) == (8, {"rack": "r1"}, True)
    assert not Node.objects.get(name="gone").healthy
    east.refresh_from_db()
    assert east.health == Cluster.Health.HEALTHY and east.last_heartbeat is not None


def test_it_rejects_a_bad_inventory_naming_the_field(agent):
    nodes = [{"name": "x", "cpu_milli": 1, "memory_mb": 1, "gpu_count": 2}]

    response = post(agent, "east", "inventory", {"nodes": nodes})

    assert response.status_code == 400
    assert "gpu_type" in response.json()["nodes"]["0"]
    assert not Node.objects.filter(name="x").exists()


def test_it_rejects_an_unknown_phase_naming_the_field(agent):
    workers = [{"attempt_id": 1, "rank": 0, "phase": "exploded"}]

    response = post(agent, "east", "heartbeat", {"workers": workers})

    assert response.status_code == 400
    assert "phase" in response.json()["workers"]["0"]


def test_the_heartbeat_answers_with_the_attempts_to_run(agent, gang):
    response = post(agent, "east", "heartbeat", {"workers": []})

    (spec,) = response.json()["run"]
    attempt = gang.attempts.get()
    assert spec["attempt_id"] == attempt.pk
    assert spec["env"] == {"LR": "0.1"}
    ranks = [(w["rank"], w["node"], sorted(w["gpu_indices"])) for w in spec["workers"]]
    assert ranks == [(0, "east-0", list(range(8))), (1, "east-1", list(range(8)))]
    assert response.json()["stop"] == []


def test_each_shard_of_a_batch_is_told_which_it_is_and_of_how_many(agent, east, alpha, alice):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    spec = {"name": "embed", "family": "batch_inference", "image": "i", "command": ["x"],
            "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60, "shards": 3,
            "priority_class": PriorityClassFactory()}  # fmt: skip
    batch, _ = actions.submit(alice, alpha, spec)
    cycle.run_cycle()

    run = post(agent, "east", "heartbeat", {"workers": []}).json()["run"]

    shards = dict(batch.batch().values_list("attempts__pk", "shard_index"))
    told = {s["attempt_id"]: (s["shard_index"], s["shards"]) for s in run}
    assert told == {attempt: (index, 3) for attempt, index in shards.items()}
    assert sorted(index for index, _ in told.values()) == [0, 1, 2]


def test_another_clusters_agent_sees_none_of_its_attempts(gang, agent_of):
    client = agent_of(ClusterFactory(name="west"))
    attempt = gang.attempts.get()
    done = report(attempt, base.EXITED, base.EXITED, codes=[0, 0])

    response = post(client, "west", "heartbeat", {"workers": done})

    assert response.json() == {"run": [], "stop": []}
    gang.refresh_from_db()
    assert gang.state == State.SCHEDULED


def test_all_workers_running_moves_the_job_to_running(agent, gang):
    attempt = gang.attempts.get()

    post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)})

    gang.refresh_from_db()
    attempt.refresh_from_db()
    assert gang.state == State.RUNNING
    assert attempt.started_at is not None


def test_a_running_attempt_reported_again_costs_no_more_queries_per_attempt(
    agent, east, django_assert_max_num_queries
):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    jobs = [JobFactory(gpus=1) for _ in range(6)]
    cycle.run_cycle()
    attempts = [job.attempts.get() for job in jobs]
    workers = [w for a in attempts for w in report(a, base.RUNNING)]
    post(agent, "east", "heartbeat", {"workers": workers})
    assert all(a.started_at for a in Attempt.objects.filter(pk__in=[a.pk for a in attempts]))

    # The same report again: a fixed number of queries, however many attempts run.
    with django_assert_max_num_queries(12):
        response = post(agent, "east", "heartbeat", {"workers": workers})
    assert response.status_code == 200


def test_one_worker_running_keeps_the_gang_scheduled(agent, gang):
    attempt = gang.attempts.get()

    post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.PENDING)})

    gang.refresh_from_db()
    assert gang.state == State.SCHEDULED


def test_one_lost_worker_stops_the_gang_which_keeps_its_gpus_until_every_rank_is_gone(agent, gang):
    attempt = gang.attempts.get()

    response = post(agent, "east", "heartbeat",
                    {"workers": report(attempt, base.RUNNING, base.LOST)})  # fmt: skip

    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.stop_reason) == ("", Outcome.LOST)
    assert [s["attempt_id"] for s in response.json()["stop"]] == [attempt.pk]
    assert Allocation.objects.active().filter(attempt=attempt).count() == 16  # rank 0 still runs

    post(agent, "east", "heartbeat", {"workers": report(attempt, base.STOPPED, base.LOST)})

    attempt.refresh_from_db()
    gang.refresh_from_db()
    assert (attempt.outcome, attempt.reason) == (Outcome.LOST, "worker 1: lost")
    assert gang.state == State.QUEUED
    assert not Allocation.objects.active().filter(attempt=attempt).exists()


def test_a_started_worker_the_agent_no_longer_reports_is_lost(agent, gang):
    attempt = gang.attempts.get()
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)})

    # Rank 1's pod was deleted while the agent was away: its report now lacks it.
    response = post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING)})
    assert response.json()["run"] == []  # never started again inside this attempt
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.STOPPED)})

    attempt.refresh_from_db()
    gang.refresh_from_db()
    assert (attempt.outcome, attempt.reason) == (
        Outcome.LOST,
        "worker 1: the agent no longer finds it",
    )
    assert gang.state == State.QUEUED  # retried as a new attempt


def test_a_started_attempt_missing_from_the_report_is_lost_not_started_again(agent, gang):
    attempt = gang.attempts.get()
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)})

    response = post(agent, "east", "heartbeat", {"workers": []})

    attempt.refresh_from_db()
    assert attempt.outcome == Outcome.LOST
    assert response.json()["run"] == []


def test_a_partly_started_gang_missing_from_the_report_is_lost_not_started_again(agent, gang):
    attempt = gang.attempts.get()
    # Rank 0 ran and logged while rank 1 was still pending: the gang never fully started.
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.PENDING)})
    line = {"attempt_id": attempt.pk, "rank": 0, "seq": 0, "stream": "stdout", "text": "step 1"}
    post(agent, "east", "logs", {"lines": [line]})

    # Both pods were deleted while the agent was away.
    response = post(agent, "east", "heartbeat", {"workers": []})

    attempt.refresh_from_db()
    gang.refresh_from_db()
    assert (attempt.outcome, attempt.started_at) == (Outcome.LOST, None)
    assert gang.state == State.QUEUED  # retried as attempt 2, whose lines count from 0 again
    assert response.json()["run"] == []
    assert list(LogChunk.objects.values_list("attempt_id", "text")) == [(attempt.pk, "step 1")]


def test_a_preempted_gang_keeps_its_gpus_while_one_rank_is_still_in_its_grace(agent, gang):
    attempt = gang.attempts.get()
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)})
    actions.request_stop([gang.pk], Outcome.PREEMPTED, "preempted for a higher-priority job")

    response = post(agent, "east", "heartbeat",
                    {"workers": report(attempt, base.STOPPED, base.RUNNING)})  # fmt: skip

    attempt.refresh_from_db()
    assert attempt.outcome == ""
    assert Allocation.objects.active().filter(attempt=attempt).count() == 16
    assert response.json()["run"] == []  # the job is not placed again while rank 1 runs

    post(agent, "east", "heartbeat", {"workers": report(attempt, base.STOPPED, base.STOPPED)})

    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.reason) == (
        Outcome.PREEMPTED,
        "preempted for a higher-priority job",
    )
    assert not Allocation.objects.active().filter(attempt=attempt).exists()


def test_a_vanished_attempt_that_was_being_stopped_ends_as_its_stop_asked(agent, gang):
    attempt = gang.attempts.get()
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)})
    Attempt.objects.filter(pk=attempt.pk).update(stop_requested_at=timezone.now(),
                                                 stop_reason=Outcome.PREEMPTED)  # fmt: skip

    post(agent, "east", "heartbeat", {"workers": []})

    attempt.refresh_from_db()
    assert attempt.outcome == Outcome.PREEMPTED


def test_an_attempt_not_started_yet_may_be_missing_from_the_report(agent, gang):
    attempt = gang.attempts.get()

    response = post(agent, "east", "heartbeat", {"workers": []})

    attempt.refresh_from_db()
    assert attempt.outcome == ""
    assert [a["attempt_id"] for a in response.json()["run"]] == [attempt.pk]


def test_a_rank_that_failed_with_a_long_reason_while_another_runs_is_stopped(agent, gang):
    attempt = gang.attempts.get()
    workers = report(attempt, base.RUNNING, base.EXITED, codes=[None, 1])
    workers[1]["reason"] = "x" * 300

    response = post(agent, "east", "heartbeat", {"workers": workers})

    assert response.status_code == 200
    attempt.refresh_from_db()
    assert attempt.stop_reason == Outcome.USER_ERROR
    assert attempt.reason.startswith("worker 1 exited with code 1")


def test_an_attempt_the_agent_reports_is_named_by_its_id_and_runtime_limit_alone(agent, gang):
    attempt = gang.attempts.get()
    running = report(attempt, base.RUNNING, base.RUNNING)

    response = post(agent, "east", "heartbeat", {"workers": running})

    assert response.json()["run"] == [{"attempt_id": attempt.pk, "max_runtime_s": 3600}]


def test_an_attempt_the_agent_lost_track_of_before_it_ran_comes_with_its_spec_again(agent, gang):
    attempt = gang.attempts.get()
    post(agent, "east", "heartbeat", {"workers": report(attempt, base.PENDING, base.PENDING)})

    response = post(agent, "east", "heartbeat", {"workers": []})

    (spec,) = response.json()["run"]
    assert spec["attempt_id"] == attempt.pk
    assert len(spec["workers"]) == 2


def test_a_heartbeat_writes_no_node_row_so_it_cannot_deadlock_with_a_commit(agent, gang):
    attempt = gang.attempts.get()

    with CaptureQueriesContext(connection) as queries:
        post(agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.RUNNING)})

    assert not [q for q in queries if '"clusters_node"' in q["sql"].split(" WHERE ")[0]
                and q["sql"].startswith("UPDATE")]  # fmt: skip


def test_an_inventory_locks_the_clusters_nodes_in_id_order_before_writing(agent, east):
    for name in ("b", "a"):
        NodeFactory(cluster=east, name=name)
    nodes = [{"name": n, "cpu_milli": 1000, "memory_mb": 1000, "gpu_type": "A100",
              "gpu_count": 8} for n in ("b", "a")]  # fmt: skip

    with CaptureQueriesContext(connection) as queries:
        post(agent, "east", "inventory", {"nodes": nodes})

    node_sql = [q["sql"] for q in queries if '"clusters_node"' in q["sql"]]
    assert node_sql[0].endswith("ORDER BY 1 ASC FOR UPDATE")  # the first statement: ids, in order


def test_a_stop_request_is_passed_to_the_agent(agent, gang):
    attempt = gang.attempts.get()
    Attempt.objects.filter(pk=attempt.pk).update(stop_requested_at=timezone.now(),
                                                 stop_reason=Outcome.PREEMPTED)  # fmt: skip

    running = report(attempt, base.RUNNING, base.PENDING)
    response = post(agent, "east", "heartbeat", {"workers": running})

    (stop,) = response.json()["stop"]
    assert (stop["attempt_id"], stop["reason"]) == (attempt.pk, "preempted")


def test_an_attempt_asked_to_stop_before_the_agent_started_it_ends_at_once(agent, gang):
    attempt = gang.attempts.get()
    Attempt.objects.filter(pk=attempt.pk).update(stop_requested_at=timezone.now(),
                                                 stop_reason=Outcome.PREEMPTED)  # fmt: skip

    response = post(agent, "east", "heartbeat", {"workers": []})

    attempt.refresh_from_db()
    gang.refresh_from_db()
    assert attempt.outcome == Outcome.PREEMPTED
    assert response.json() == {"run": [], "stop": []}
    assert not Allocation.objects.active().filter(attempt=attempt).exists()  # GPUs back now
    assert gang.state == State.QUEUED


def test_logs_sent_twice_are_kept_once(agent, gang):
    attempt = gang.attempts.get()
    lines = [{"attempt_id": attempt.pk, "rank": 0, "seq": i, "stream": "stdout", "text": f"l{i}"}
             for i in range(3)]  # fmt: skip

    post(agent, "east", "logs", {"lines": lines})
    post(agent, "east", "logs", {"lines": lines})

    assert list(LogChunk.objects.order_by("seq").values_list("text", flat=True)) == [
        "l0", "l1", "l2"]  # fmt: skip


def test_a_worker_log_past_the_cap_is_dropped_with_one_note(agent, gang, settings):
    settings.MLSCHED_LOG_MAX_LINES = 3
    attempt = gang.attempts.get()
    lines = [{"attempt_id": attempt.pk, "rank": 0, "seq": i, "stream": "stdout", "text": f"l{i}"}
             for i in range(6)]  # fmt: skip

    post(agent, "east", "logs", {"lines": lines[:4]})
    post(agent, "east", "logs", {"lines": lines[4:]})

    kept = list(LogChunk.objects.order_by("seq").values_list("seq", "stream", "text"))
    assert kept == [
        (0, "stdout", "l0"),
        (1, "stdout", "l1"),
        (2, "stdout", "l2"),
        (3, "stderr", "[mlsched] log truncated: this worker's output passed 3 lines"),
    ]


def test_a_tenant_past_its_log_rate_loses_lines_and_its_neighbour_does_not(east, settings):
    settings.MLSCHED_TENANT_LOG_RATE = 4
    for i in range(2):
        NodeFactory(cluster=east, name=f"east-{i}", gpu_count=8)
    noisy, quiet = JobFactory(gpus=1), JobFactory(gpus=1)  # two tenants
    cycle.run_cycle()
    noisy_attempt, quiet_attempt = noisy.attempts.get(), quiet.attempts.get()

    def lines(attempt, start, count):
        return [base.LogLine(attempt.pk, 0, i, "stdout", f"l{i}")
                for i in range(start, start + count)]  # fmt: skip

    minute = 60.0 * 29_000_000  # both batches inside one rate window
    agents.store_logs(east, lines(noisy_attempt, 0, 3) + lines(quiet_attempt, 0, 3), minute)
    agents.store_logs(east, lines(noisy_attempt, 3, 3) + lines(quiet_attempt, 3, 1), minute + 5)
    agents.store_logs(east, lines(quiet_attempt, 4, 2), minute + 60)  # the next minute

    def kept(attempt):
        return list(LogChunk.objects.filter(attempt=attempt).order_by("seq")
                    .values_list("seq", "text"))  # fmt: skip

    note = "[mlsched] log lines dropped: this tenant passed 4 lines a minute"
    assert kept(noisy_attempt) == [(0, "l0"), (1, "l1"), (2, "l2"), (3, "l3"), (4, note)]
    assert kept(quiet_attempt) == [(i, f"l{i}") for i in range(6)]


def test_lines_sent_again_do_not_count_toward_the_tenants_log_rate(agent, gang, settings):
    settings.MLSCHED_TENANT_LOG_RATE = 4
    attempt = gang.attempts.get()
    east = attempt.cluster
    lines = [base.LogLine(attempt.pk, 0, i, "stdout", f"l{i}") for i in range(5)]
    minute = 60.0 * 29_000_001  # every batch inside one rate window

    agents.store_logs(east, lines[:3], minute)
    assert agents.store_logs(east, lines[:3], minute + 1) == 0  # an agent restart resends them
    agents.store_logs(east, lines[3:], minute + 2)

    note = "[mlsched] log lines dropped: this tenant passed 4 lines a minute"
    kept = list(LogChunk.objects.filter(attempt=attempt).order_by("seq").values_list("text"))
    assert kept == [("l0",), ("l1",), ("l2",), ("l3",), (note,)]


def test_odd_worker_output_is_stored_cleaned_and_cut_not_refused(agent, gang):
    attempt = gang.attempts.get()
    texts = ["nul\x00byte", "lone \ud800 surrogate", "x" * 70_000]
    lines = [{"attempt_id": attempt.pk, "rank": 0, "seq": i, "stream": "stdout", "text": t}
             for i, t in enumerate(texts)]  # fmt: skip

    # As an agent sends it: json.dumps escapes the surrogate.
    response = agent.post("/api/v1/agent/east/logs/", json.dumps({"lines": lines}),
                          content_type="application/json")  # fmt: skip

    assert response.status_code == 200
    stored = list(LogChunk.objects.order_by("seq").values_list("text", flat=True))
    assert stored == ["nul\ufffdbyte", "lone ? surrogate", "x" * 65_536]


def test_a_worker_reason_with_nul_or_too_long_is_kept_cleaned_and_cut(agent, gang):
    attempt = gang.attempts.get()
    worker = {"attempt_id": attempt.pk, "rank": 0, "phase": "failed",
              "reason": "Evicted\x00" + "y" * 400}  # fmt: skip

    response = post(agent, "east", "heartbeat", {"workers": [worker]})

    assert response.status_code == 200
    attempt.refresh_from_db()
    assert "Evicted\ufffdyyy" in attempt.reason and len(attempt.reason) <= 300


@pytest.mark.parametrize(
    ("what", "item", "field"),
    [
        ("logs", {"rank": 2**40}, "rank"),
        ("logs", {"seq": 2**31}, "seq"),
        ("logs", {"attempt_id": 2**70}, "attempt_id"),
        ("heartbeat", {"exit_code": 2**40}, "exit_code"),
        ("heartbeat", {"checkpoint_at": 1e300}, "checkpoint_at"),
        ("inventory", {"cpu_milli": 2**40}, "cpu_milli"),
        ("inventory", {"topology": {"rack\x00": "r1"}}, "topology"),
    ],
)
def test_a_value_the_database_cannot_hold_is_a_400_naming_it(agent, gang, what, item, field):
    attempt = gang.attempts.get()
    base_item = {
        "logs": {"attempt_id": attempt.pk, "rank": 0, "seq": 0, "stream": "stdout", "text": "x"},
        "heartbeat": {"attempt_id": attempt.pk, "rank": 0, "phase": "running"},
        "inventory": {"name": "east-9", "cpu_milli": 1000, "memory_mb": 1000},
    }[what]
    key = {"logs": "lines", "heartbeat": "workers", "inventory": "nodes"}[what]

    response = post(agent, "east", what, {key: [{**base_item, **item}]})

    assert response.status_code == 400
    assert field in str(response.json())


def test_logs_of_another_clusters_attempt_are_dropped(gang, agent_of):
    client = agent_of(ClusterFactory(name="west"))
    line = {"attempt_id": gang.attempts.get().pk, "rank": 0, "seq": 0, "stream": "stdout",
            "text": "forged"}  # fmt: skip

    response = post(client, "west", "logs", {"lines": [line]})

    assert response.json() == {"stored": 0}
    assert not LogChunk.objects.exists()


OUTCOMES = [
    # (worker phases and exit codes, stop reason, want outcome)
    ([(base.EXITED, 0), (base.EXITED, 0)], "", Outcome.SUCCEEDED),
    ([(base.EXITED, 0), (base.RUNNING, None)], "", None),
    ([(base.EXITED, 3), (base.RUNNING, None)], "", Outcome.USER_ERROR),
    ([(base.RUNNING, None), (base.FAILED, 137)], "", Outcome.INFRA_ERROR),
    ([(base.EXITED, 3), (base.LOST, None)], "", Outcome.LOST),
    ([(base.TIMED_OUT, -15), (base.RUNNING, None)], "", Outcome.TIMEOUT),
    ([(base.STOPPED, -15), (base.STOPPED, -9)], "preempted", Outcome.PREEMPTED),
    ([(base.STOPPED, -15), (base.RUNNING, None)], "canceled", Outcome.CANCELED),
    ([(base.STOPPED, -15), (base.STOPPED, -15)], "", Outcome.LOST),
]


@pytest.mark.parametrize(("workers", "stop_reason", "want"), OUTCOMES)
def test_attempt_outcome(workers, stop_reason, want):
    statuses = [base.WorkerStatus(1, r, p, c) for r, (p, c) in enumerate(workers)]

    got = agents.attempt_outcome(statuses, 2, stop_reason)

    assert (got[0] if got else None) == want


@pytest.mark.parametrize(("phase", "said"), [(base.LOST, "worker 1: lost"),
                                             (base.FAILED, "worker 1: failed"),
                                             (base.TIMED_OUT, "worker 1 timed out")])  # fmt: skip
def test_a_worker_ended_without_a_reason_is_said_by_what_became_of_it(phase, said):
    statuses = [base.WorkerStatus(1, 0, base.RUNNING), base.WorkerStatus(1, 1, phase)]

    assert agents.attempt_outcome(statuses, 2, "")[2] == said


def test_an_out_of_memory_kill_fails_the_attempt_as_the_users_and_says_so():
    statuses = [base.WorkerStatus(1, 0, base.EXITED, 137, "OOMKilled"),
                base.WorkerStatus(1, 1, base.RUNNING)]  # fmt: skip

    got = agents.attempt_outcome(statuses, 2, "")

    assert got == (Outcome.USER_ERROR, 137, "worker 0 exited with code 137 (OOMKilled)")


def test_a_silent_cluster_turns_unhealthy_then_its_attempts_are_lost(gang, east, settings):
    now = timezone.now()
    ClusterFactory(name="west", last_heartbeat=now + timedelta(hours=1))  # still reporting
    Cluster.objects.filter(pk=east.pk).update(
        health=Cluster.Health.HEALTHY,
        last_heartbeat=now - timedelta(seconds=settings.MLSCHED_AGENT_TIMEOUT_S + 1),
    )

    first = agents.sweep_silent_clusters(now)
    later = agents.sweep_silent_clusters(
        now + timedelta(seconds=settings.MLSCHED_AGENT_LOST_GRACE_S)
    )

    assert (first, later) == ({"unhealthy": 1, "lost": 0}, {"unhealthy": 0, "lost": 1})
    gang.refresh_from_db()
    assert gang.state == State.QUEUED
    assert gang.attempts.get().outcome == Outcome.LOST


def test_nothing_is_declared_lost_while_no_cluster_reaches_the_control_plane(gang, east, settings):
    now = timezone.now()
    ClusterFactory(name="west", last_heartbeat=now - timedelta(hours=1))
    Cluster.objects.filter(pk=east.pk).update(
        health=Cluster.Health.HEALTHY, last_heartbeat=now - timedelta(hours=1)
    )

    swept = agents.sweep_silent_clusters(now)

    assert swept == {"unhealthy": 2, "lost": 0}
    assert gang.attempts.get().outcome == ""
    east.refresh_from_db()
    assert east.health == Cluster.Health.UNHEALTHY  # no new work goes there meanwhile


def test_a_second_inventory_updates_the_nodes_in_place(agent, east):
    node = {"name": "east-0", "cpu_milli": 64000, "memory_mb": 512000, "gpu_type": "A100",
            "gpu_count": 8}  # fmt: skip
    post(agent, "east", "inventory", {"nodes": [node]})
    first = Node.objects.get(cluster=east, name="east-0")

    post(agent, "east", "inventory", {"nodes": [{**node, "gpu_count": 4, "ready": False}]})

    again = Node.objects.get(cluster=east, name="east-0")
    assert again.pk == first.pk
    assert (again.gpu_count, again.healthy) == (4, False)


def test_agents_are_never_rate_limited(agent, gang, settings):
    settings.MLSCHED_API_RATE = "1/minute"
    attempt = gang.attempts.get()

    codes = [
        post(
            agent, "east", "heartbeat", {"workers": report(attempt, base.RUNNING, base.PENDING)}
        ).status_code
        for _ in range(5)
    ]

    assert codes == [200] * 5


def test_a_stale_report_of_an_ended_attempt_stops_nothing_of_the_jobs_next_attempt(gang):
    first = gang.attempts.get()
    stale = Attempt.objects.select_related("job").get(pk=first.pk)  # read by the heartbeat
    actions.end_attempt(first.pk, Attempt.Outcome.LOST)  # meanwhile: lost, requeued, placed
    Job.objects.filter(pk=gang.pk).update(not_before=None)
    cycle.run_cycle()
    second = gang.attempts.get(outcome="")
    # Rank 0 failed, rank 1 still runs: the gang is over, its ranks are asked to stop.
    statuses = [
        base.WorkerStatus(first.pk, 0, base.EXITED, 1),
        base.WorkerStatus(first.pk, 1, base.RUNNING),
    ]

    agents.apply_report(stale, statuses)

    second.refresh_from_db()
    assert second.stop_requested_at is None
