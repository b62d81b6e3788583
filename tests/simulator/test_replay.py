"""The dynamic replay: trace formats, cluster specs, policies and the report."""

import pytest

from jobs.simulator import replay_engine
from jobs.simulator.cli import main
from jobs.simulator.replay import Replay, make_policy
from jobs.simulator.replay_cli import _time_mean, percentile, summarise
from jobs.simulator.traces import (
    ClusterSpec,
    TraceJob,
    family_of,
    parse_clusters,
    read_jobs,
    worker_shape,
)

ONE_NODE = [ClusterSpec("a", 1, 4, "A100")]


def job(name, submit, duration, gpus):
    return TraceJob(name, submit, duration, gpus)


def replay(jobs, policy, clusters=ONE_NODE, half_life_h=24.0):
    result = Replay(clusters, jobs, make_policy(policy, half_life_h)).run()
    return {j.trace.id: j for j in result.jobs}, result


def test_it_reads_itp_and_philly_traces(tmp_path):
    itp = tmp_path / "itp.csv"
    itp.write_text("job_id,submission_time,duration,num_gpu\nb,20,5,2\na,10,100,1\n")
    philly = tmp_path / "philly.csv"
    philly.write_text(
        "job_id,submit_time,real_iteration,model_name,ddl,batch_size,num_gpu,real_duration,"
        "duration,iteration\n0,0,1,vgg16,9,64,4,300,300,1\n"
    )
    assert read_jobs(itp) == [job("a", 10, 100, 1), job("b", 20, 5, 2)]
    assert read_jobs(philly) == [job("0", 0, 300, 4)]


def test_a_trace_may_name_each_jobs_team(tmp_path):
    named = tmp_path / "teams.csv"
    named.write_text("job_id,submission_time,duration,num_gpu,tenant\na,10,100,1,vision\n")

    (read,) = read_jobs(named)
    assert read == TraceJob("a", 10, 100, 1, "vision")
    assert Replay(ONE_NODE, [read], make_policy("fifo")).jobs[0].tenant == "vision"


def test_it_reads_a_trace_saved_with_a_bom_and_crlf_line_ends(tmp_path):
    itp = tmp_path / "itp.csv"
    itp.write_bytes(b"\xef\xbb\xbfjob_id,submission_time,duration,num_gpu\r\na,10,100,1\r\n")

    assert read_jobs(itp) == [job("a", 10, 100, 1)]


def test_it_parses_cluster_specs():
    assert parse_clusters("a:16x8xA100,b:32x4xV100") == [
        ClusterSpec("a", 16, 8, "A100"),
        ClusterSpec("b", 32, 4, "V100"),
    ]
    with pytest.raises(ValueError):
        parse_clusters("a:16x8")


def test_families_follow_the_documented_rule():
    assert family_of(job("g", 0, 60, 8)) == "training"
    assert family_of(job("l", 0, 5 * 3600, 1)) == "training"
    assert family_of(job("e", 0, 600, 1)) == "evaluation"
    assert family_of(job("b", 0, 3600, 1)) == "batch_inference"


def test_a_job_larger_than_a_node_becomes_a_gang_of_full_nodes():
    assert worker_shape(job("g", 0, 1, 32), 8) == (4, 8)
    assert worker_shape(job("s", 0, 1, 2), 8) == (1, 2)


def test_fifo_blocks_behind_a_job_that_does_not_fit():
    jobs = [job("a", 0, 100, 3), job("b", 1, 100, 4), job("c", 2, 10, 1)]
    by_id, _ = replay(jobs, "fifo")
    assert by_id["b"].first_start == 100
    assert by_id["c"].first_start == 200  # one GPU was free at 2, but FIFO keeps c behind b


def test_priority_runs_evaluations_first():
    jobs = [job("a", 0, 100, 4), job("train", 1, 5 * 3600, 4), job("eval", 2, 60, 1)]
    by_id, _ = replay(jobs, "priority")
    assert by_id["eval"].first_start == 100
    assert by_id["train"].first_start == 160


def test_fairshare_serves_the_tenant_using_fewest_gpus(monkeypatch):
    tenants = {"a": "t0", "b": "t0", "c": "t1"}
    monkeypatch.setattr("jobs.simulator.replay.tenant_of", lambda j: tenants[j.id])
    jobs = [job("a", 0, 100, 2), job("b", 1, 100, 4), job("c", 2, 100, 2)]
    by_id, _ = replay(jobs, "fairshare")
    assert by_id["c"].first_start == 2  # t1 uses nothing; b (t0) cannot fit anyway
    assert by_id["b"].first_start == 102


def test_sjf_oracle_runs_the_smallest_gpu_time_first():
    jobs = [job("a", 0, 100, 4), job("long", 1, 1000, 2), job("short", 2, 50, 2)]
    by_id, _ = replay(jobs, "sjf-oracle")
    assert by_id["short"].first_start == 100
    assert by_id["long"].first_start == 100  # both fit once a ends; short was first in order


def test_mlsched_runs_a_shorter_job_before_an_older_longer_one(monkeypatch):
    monkeypatch.setattr("jobs.simulator.replay.tenant_of", lambda j: "t0")
    # Same family and tier (one-GPU inference, 20 min vs 3 h): only the size term orders them.
    jobs = [job("a", 0, 600, 1), job("long", 1, 3 * 3600, 1), job("short", 2, 1200, 1)]
    by_id, _ = replay(jobs, "mlsched", [ClusterSpec("a", 1, 1, "A100")])
    assert by_id["short"].first_start == 600
    assert by_id["long"].first_start == 1800


@pytest.mark.parametrize("policy", ["fifo", "priority", "fairshare", "mlsched", "sjf-oracle"])
def test_every_job_finishes_and_gpus_are_never_overcommitted(policy):
    jobs = [job(f"j{i}", i * 7, 50 + (i * 37) % 200, [1, 1, 2, 4, 8][i % 5]) for i in range(40)]
    clusters = [ClusterSpec("a", 2, 4, "A100"), ClusterSpec("b", 1, 8, "V100")]
    by_id, result = replay(jobs, policy, clusters)
    assert all(j.end is not None for j in by_id.values())
    assert all(0 <= used <= result.total_gpus for _, used in result.timeline)
    assert result.timeline[-1][1] == 0
    for j in by_id.values():
        assert j.end - j.first_start >= j.trace.duration - 1e-6


def test_mlsched_skips_only_cycles_that_could_change_nothing(monkeypatch):
    # Overloaded, with all three families: evaluations arrive while inference runs (so a
    # full cluster may still preempt) and while only training runs (so it may not).
    durations = [300, 2 * 3600, 5 * 3600, 600, 3600]
    jobs = [job(f"j{i}", i * 40, durations[i % 5], [1, 1, 2, 1, 4][i % 5]) for i in range(60)]
    clusters = [ClusterSpec("a", 2, 4, "A100")]
    calls = []
    real_place = replay_engine.place

    def counted(snapshot):
        calls.append(snapshot.now)
        return real_place(snapshot)

    monkeypatch.setattr(replay_engine, "place", counted)
    skipping, _ = replay(jobs, "mlsched", clusters)
    skipped_calls = len(calls)
    calls.clear()
    monkeypatch.setattr(replay_engine, "_may_change", lambda replay, fair_share=False: True)
    every, _ = replay(jobs, "mlsched", clusters)

    assert skipped_calls < len(calls)
    outcome = {k: (j.first_start, j.end, j.preempted) for k, j in skipping.items()}
    assert outcome == {k: (j.first_start, j.end, j.preempted) for k, j in every.items()}
    assert any(j.preempted for j in every.values())


def test_a_job_no_cluster_can_hold_is_reported_not_run():
    by_id, result = replay([job("huge", 0, 10, 64), job("ok", 0, 10, 1)], "fifo")
    assert result.never_fit == 1
    assert by_id["ok"].end == 10


def test_percentile_and_time_mean():
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile([5, 1, 3, 2, 4], 100) == 5
    assert percentile([], 95) == 0
    assert _time_mean([(0, 4), (5, 0)], 0, 10) == pytest.approx(2.0)


def test_summary_counts_waits_from_submit_to_first_start():
    by_id, result = replay([job("a", 0, 100, 4), job("b", 10, 100, 4)], "fifo")
    stats = summarise(result)
    assert stats["mean_wait"] == pytest.approx(45.0)
    assert stats["max_wait"] == pytest.approx(90.0)


def test_utilisation_while_arriving_ignores_the_tail_after_the_last_submit():
    # One node of 4 GPUs: a runs 0-100 on 2 GPUs; b is submitted at 50 and runs 50-250 alone.
    _, result = replay([job("a", 0, 100, 2), job("b", 50, 200, 2)], "fifo")
    stats = summarise(result)
    assert stats["util_arrivals"] == pytest.approx(50.0)  # 2 of 4 GPUs over 0-50
    assert stats["util"] == pytest.approx(100 * (2 * 100 + 2 * 200) / (4 * 250))


def test_the_cli_prints_the_summary_last(capsys, tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\na,0,100,4\nb,10,100,4\n")
    out = tmp_path / "out"
    argv = ["replay", "--trace", str(trace), "--clusters", "a:1x4xA100", "--policy", "fifo"]
    assert main([*argv, "--out", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "mean_wait_s: 45.0 p95_wait_s: 90.0 max_wait_s: 90.0 gpu_util_pct: 100.00"
    assert (out / "replay_jobs_fifo.png").exists()


def test_a_long_replay_reports_its_progress(monkeypatch):
    monkeypatch.setattr("jobs.simulator.replay.PROGRESS_EVERY_S", 0.0)
    jobs = [job(f"j{i}", i * 10, 100, 1) for i in range(20)]
    seen = []

    Replay(ONE_NODE, jobs, make_policy("fifo")).run(lambda done, total: seen.append((done, total)))

    assert seen and all(total == 20 for _, total in seen)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert seen[-1][0] == 20


def test_a_team_that_floods_the_queue_does_not_keep_the_gpus_from_one_that_comes_later(
    monkeypatch,
):
    """160 one-hour jobs of t0 on 8 GPUs, then 8 of t1 ten minutes later: as t0's first jobs
    end, t1 gets its fair half of the GPUs (equal weights), not the GPUs of the 20 hours of
    t0's queue (as first-come-first-served gives them), and t0 goes on meanwhile."""
    monkeypatch.setattr("jobs.simulator.replay.tenant_of", lambda j: j.id.split("-")[0])
    flood = [job(f"t0-{i}", i, 3600, 1) for i in range(160)]
    later = [job(f"t1-{i}", 600 + i, 3600, 1) for i in range(8)]
    node = [ClusterSpec("a", 1, 8, "A100")]

    fair, _ = replay(flood + later, "mlsched", node)
    first, _ = replay(flood + later, "fifo", node)

    def started(got, tenant):
        return sorted(j.first_start for j in got.values() if j.trace.id.startswith(tenant))

    t1 = started(fair, "t1")
    assert t1[:4] == [3600 + i for i in range(4)]  # half of the first 8 GPUs freed
    assert max(t1) <= 2 * 3600 + 8  # the other half from the next round
    assert min(started(first, "t1")) >= 20 * 3600  # behind all of t0's queue
    t0_running_then = [s for s in started(fair, "t0") if 3600 <= s < 3600 + 8]
    assert len(t0_running_then) == 4  # t0 goes on with the other half
    assert all(j.end is not None for j in fair.values())


@pytest.mark.parametrize("half_life_h", [24.0, 0.0], ids=["remembered", "forgotten"])
def test_a_team_that_held_the_gpus_for_days_yields_to_one_that_did_not(monkeypatch, half_life_h):
    """t0 holds the node's 4 GPUs for two days; both teams queue one-hour jobs just before
    they free up, t0 first. Remembering t0's two days (as the live cycle does, with its
    24-hour half-life), t1 gets 3 of the 4; forgetting them, they share them evenly."""
    monkeypatch.setattr("jobs.simulator.replay.tenant_of", lambda j: j.id.split("-")[0])
    days = [job(f"t0-days{i}", 0, 48 * 3600, 1) for i in range(4)]
    t0 = [job(f"t0-{i}", 48 * 3600 - 120 + i, 3600, 1) for i in range(4)]
    t1 = [job(f"t1-{i}", 48 * 3600 - 60 + i, 3600, 1) for i in range(4)]

    got, _ = replay(days + t0 + t1, "mlsched", half_life_h=half_life_h)

    freed = [j.trace.id for j in got.values() if j.first_start == 48 * 3600]
    assert sum(name.startswith("t1") for name in freed) == (3 if half_life_h else 2)
    assert len(freed) == 4


def flood_then_later(later_gpus=1):
    """40 three-hour jobs of team big on 8 GPUs, then 4 one-hour jobs of team small."""
    flood = [TraceJob(f"big-{i}", i, 3 * 3600, 1, "big") for i in range(40)]
    later = [TraceJob(f"small-{i}", 1800 + i, 3600, later_gpus, "small") for i in range(4)]
    return flood + later


def test_with_fair_share_preemption_a_later_team_evicts_a_flooding_one_up_to_even():
    node = [ClusterSpec("a", 1, 8, "A100")]
    policy = make_policy("mlsched", fair_share_preemption=True)
    got = {j.trace.id: j for j in Replay(node, flood_then_later(), policy).run().jobs}
    without = {j.trace.id: j for j in replay(flood_then_later(), "mlsched", node)[0].values()}

    small = [j for j in got.values() if j.tenant == "small"]
    assert all(j.first_start - j.trace.submit < 60 for j in small)  # at once, not in 2.5 h
    assert min(j.first_start for j in without.values() if j.tenant == "small") >= 3 * 3600
    # Four taken from big's eight: 4 against 4, even; nobody evicted back.
    assert sum(j.preempted for j in got.values()) == 4
    assert all(j.end is not None for j in got.values())


def test_fair_share_preemption_skips_only_cycles_that_could_change_nothing(monkeypatch):
    node = [ClusterSpec("a", 1, 8, "A100")]
    mid = [TraceJob(f"mid-{i}", 900 + 7 * i, 5400, 2, "mid") for i in range(6)]
    jobs = flood_then_later() + mid

    def outcomes():
        result = Replay(node, jobs, make_policy("mlsched", fair_share_preemption=True)).run()
        return {j.trace.id: (j.first_start, j.end, j.preempted) for j in result.jobs}

    skipping = outcomes()
    monkeypatch.setattr(replay_engine, "_may_change", lambda replay, fair_share=False: True)
    assert outcomes() == skipping
    assert any(preempted for _, _, preempted in skipping.values())
