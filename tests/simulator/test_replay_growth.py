"""Elastic gangs that grow in the replay (``--grow``): under ``mlsched`` a gang that started
smaller restarts larger where the queue leaves room (``Decision.grown``), keeping its work,
after a stop of the policy's grace period (60 s), and runs its remaining work at its new size's
speed."""

import pytest

from jobs.simulator.cli import main
from jobs.simulator.replay import Replay, make_policy
from jobs.simulator.traces import ClusterSpec, TraceJob

H = 3600.0
FIVE_NODES = [ClusterSpec("a", 5, 8, "A100")]


def replay(jobs, grow, elastic=0.75, clusters=FIVE_NODES):
    result = Replay(clusters, jobs, make_policy("mlsched", grow=grow), elastic).run()
    return {j.trace.id: j for j in result.jobs}, result


def busy_two_nodes_then_a_gang_of_four(gang_hours=3.0):
    # "busy" holds two of the five nodes for 2 h; "gang" (4 workers of 8 GPUs, at least 3 at
    # a share of 0.75) starts at 10 s with the three free nodes: its whole gang would wait
    # for busy's 4 h runtime limit.
    return [TraceJob("busy", 0, 2 * H, 16), TraceJob("gang", 10, gang_hours * H, 32)]


def test_a_gang_that_started_smaller_grows_when_the_job_beside_it_ends_and_ends_sooner():
    jobs = busy_two_nodes_then_a_gang_of_four()

    rigid, _ = replay(jobs, grow=False)
    by_id, result = replay(jobs, grow=True)

    # Without growth: 3 h of its whole gang take 4 h on three workers.
    assert rigid["gang"].end == 10 + 4 * H
    # With it: busy ends at 2 h; the gang has done 7190 s x 3/4 = 5392.5 s of its 10,800,
    # stops for 60 s, and runs the other 5407.5 s on four workers from 7260 s.
    assert by_id["gang"].first_start == 10
    assert by_id["gang"].end == pytest.approx(7260 + 5407.5)
    assert (by_id["gang"].grows, result.grows) == (1, 1)
    assert by_id["gang"].workers == 4  # it ended whole


def test_a_growing_gang_holds_its_gpus_for_the_grace_period():
    _, result = replay(busy_two_nodes_then_a_gang_of_four(), grow=True)

    allocated = dict(result.timeline)
    assert allocated[2 * H] == 24  # busy gone, the gang's three nodes held while it stops
    assert allocated[2 * H + 60] == 32  # restarted on all four


def test_a_queued_job_waiting_for_room_keeps_the_gang_from_growing():
    # "waiter" (3 workers, rigid at 0.75) waits from 20 s; busy's two nodes do not hold it.
    jobs = [*busy_two_nodes_then_a_gang_of_four(), TraceJob("waiter", 20, H, 24)]

    by_id, result = replay(jobs, grow=True)

    assert by_id["gang"].end == 10 + 4 * H  # on three workers to its end
    assert result.grows == 0
    assert by_id["waiter"].first_start == by_id["gang"].end


def test_the_requeued_gang_comes_first_of_the_queue_until_it_starts():
    # Sixteen one-GPU jobs of a higher tier arrive as the gang's GPUs come back: its claim on
    # the room lets it restart whole; without it, they would take two nodes and leave it
    # three workers.
    rivals = [TraceJob(f"r{i:02d}", 2 * H + 60, H, 1) for i in range(16)]

    by_id, result = replay([*busy_two_nodes_then_a_gang_of_four(), *rivals], grow=True)

    assert by_id["gang"].end == pytest.approx(7260 + 5407.5)
    assert result.grows == 1


def test_a_gang_grows_once_it_has_run_the_policys_time_without_another_arrival_or_end():
    # "short" frees a node 190 s after the gang (4 workers, at least 2 at a share of 0.5)
    # started on two; at 610 s, 600 s into its run, it grows to three.
    jobs = [
        TraceJob("busy", 0, 2 * H, 16),
        TraceJob("short", 0, 200, 8),
        TraceJob("gang", 10, H, 32),
    ]

    by_id, _ = replay(jobs, grow=True, elastic=0.5)

    # 600 s on two workers did 300 s of its 3600; 3300 s on three workers take 4400 s.
    assert by_id["gang"].end == pytest.approx(670 + 4400)


def test_a_gang_whose_work_ends_within_the_grace_period_ends_as_it_would(monkeypatch):
    # Its limit says hours to go; its real work ends 10 s after busy, within the 60 s stop.
    asked = []
    grow = Replay.grow

    def recorded(self, *args):
        asked.append(grow(self, *args))
        return asked[-1]

    monkeypatch.setattr(Replay, "grow", recorded)

    by_id, result = replay(busy_two_nodes_then_a_gang_of_four(gang_hours=1.5), grow=True)

    assert asked == [False]  # the core asked, the gang ended first
    assert by_id["gang"].end == 10 + 2 * H
    assert result.grows == 0


def staggered_jobs():
    sizes = [1, 8, 16, 24, 32]
    return [
        TraceJob(f"j{i:02d}", i * 2400, 1800 + (i * 1337) % 9000, sizes[i % 5]) for i in range(40)
    ]


def ran_with(job) -> float:
    """The workers of one run from its first start to its end that do the job's work in that
    time, at a linear speed-up."""
    return job.trace.duration * job.whole / (job.end - job.first_start)


def test_without_grow_each_gang_runs_once_at_the_size_it_started_with():
    four_nodes = [ClusterSpec("a", 4, 8, "A100")]

    by_id, result = replay(staggered_jobs(), grow=False, elastic=0.5, clusters=four_nodes)
    grown, with_growth = replay(staggered_jobs(), grow=True, elastic=0.5, clusters=four_nodes)

    jobs = list(by_id.values())
    assert (result.grows, result.preemptions) == (0, 0)
    smaller = 0
    for job in jobs:  # each ran once, with some whole number of its workers, at that pace
        size = ran_with(job)
        assert size == pytest.approx(round(size)) and job.least <= round(size) <= job.whole
        smaller += round(size) < job.whole
    assert smaller  # some gangs started smaller
    assert with_growth.grows == 1
    assert sum(j.end for j in grown.values()) != sum(j.end for j in jobs)


def test_the_cli_reports_grows_with_grow_only(tmp_path, capsys):
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\nbusy,0,7200,16\ngang,10,10800,32\n")
    argv = ["replay", "--trace", str(trace), "--clusters", "a:5x8xA100", "--policy", "mlsched"]

    assert main([*argv, "--elastic", "0.75", "--grow"]) == 0
    assert "preemptions=0 grows=1\n" in capsys.readouterr().out
    assert main([*argv, "--elastic", "0.75"]) == 0
    assert "grows=" not in capsys.readouterr().out
