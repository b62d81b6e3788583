"""Elastic gangs in the replay (``--elastic``): under ``mlsched`` a training gang may start
with a share of its workers, running slower in proportion; the other policies place whole
gangs."""

import pytest

from jobs.simulator.cli import main
from jobs.simulator.replay import Replay, make_policy
from jobs.simulator.traces import ClusterSpec, TraceJob

FOUR_NODES = [ClusterSpec("a", 4, 8, "A100")]


def replay(jobs, elastic, policy="mlsched", clusters=FOUR_NODES):
    result = Replay(clusters, jobs, make_policy(policy), elastic).run()
    return {j.trace.id: j for j in result.jobs}, result


def two_nodes_busy_then_a_gang_of_four():
    # "busy" holds two of the four nodes for 10 h; "gang" asks for all four for 1 h.
    return [TraceJob("busy", 0, 10 * 3600, 16), TraceJob("gang", 10, 3600, 32)]


def test_an_elastic_gang_starts_with_the_free_nodes_and_runs_slower_in_proportion():
    by_id, _ = replay(two_nodes_busy_then_a_gang_of_four(), elastic=0.5)

    gang = by_id["gang"]
    assert gang.first_start == 10
    assert gang.end - gang.first_start == pytest.approx(2 * 3600)  # half the gang: twice as long
    assert gang.workers == gang.whole == 4  # it ended: its whole gang again


def test_a_rigid_gang_waits_for_its_whole_gang():
    by_id, _ = replay(two_nodes_busy_then_a_gang_of_four(), elastic=1.0)

    assert by_id["gang"].first_start == 10 * 3600
    assert by_id["gang"].end - by_id["gang"].first_start == pytest.approx(3600)


def test_an_elastic_gang_does_not_start_below_its_share():
    # Three of four nodes busy: a quarter of the gang is below the half it may start with.
    jobs = [TraceJob("busy", 0, 10 * 3600, 24), TraceJob("gang", 10, 3600, 32)]

    by_id, _ = replay(jobs, elastic=0.5)

    assert by_id["gang"].first_start == 10 * 3600


def test_the_other_policies_place_whole_gangs_whatever_the_share():
    by_id, _ = replay(two_nodes_busy_then_a_gang_of_four(), elastic=0.5, policy="fifo")

    assert by_id["gang"].first_start == 10 * 3600


def test_elastic_gangs_finish_their_work_and_never_overcommit_gpus():
    jobs = [
        TraceJob(f"j{i}", i * 7, 50 + (i * 37) % 200, [1, 2, 8, 16, 24][i % 5]) for i in range(40)
    ]

    by_id, result = replay(jobs, elastic=0.34)

    assert all(j.end is not None for j in by_id.values())
    assert all(0 <= used <= result.total_gpus for _, used in result.timeline)
    assert result.timeline[-1][1] == 0
    started_small = [j for j in by_id.values() if j.end - j.first_start > j.trace.duration + 1e-6]
    assert started_small  # some gang ran with fewer workers, for longer


def test_the_cli_takes_a_share_in_0_to_1(tmp_path, capsys):
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\nbusy,0,36000,16\ngang,10,3600,32\n")
    argv = ["replay", "--trace", str(trace), "--clusters", "a:4x8xA100", "--policy", "mlsched"]

    assert main([*argv, "--elastic", "0.5"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("mean_wait_s: 0.0 ")
    assert main(argv) == 0  # whole gangs: the gang waits 35,990 s
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("mean_wait_s: 17995.0 ")
    for bad in ("0", "1.5"):
        with pytest.raises(SystemExit):
            main([*argv, "--elastic", bad])
