"""The simulator's command line: arguments, the CSV layout, the plot and the last line."""

import csv
from pathlib import Path

import pytest

from jobs.simulator.cli import main, parse_seeds
from jobs.simulator.report import HEADER


def run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out.strip().splitlines()


def test_parse_seeds_takes_ranges_and_lists():
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("1,3,5-6") == [1, 3, 5, 6]
    with pytest.raises(ValueError):
        parse_seeds("51-42")


@pytest.mark.parametrize(
    "options",
    [["--tune", "0"], ["--tune", "1e9"], ["--seeds", "51-42"]],
)
def test_fgd_options_out_of_range_are_refused(capsys, n4_gpu_nodes, p12_mixed_pods, options):
    argv = ["fgd", "--nodes", str(n4_gpu_nodes), "--pods", str(p12_mixed_pods), "--policy", "fgd"]

    with pytest.raises(SystemExit) as exit:
        main([*argv, *options])

    assert exit.value.code == 2
    assert options[0] in capsys.readouterr().err


def test_it_writes_the_published_csv_layout_and_a_plot(
    capsys, tmp_path, n4_gpu_nodes, p12_mixed_pods
):
    out = tmp_path / "out"
    argv = ["fgd", "--nodes", str(n4_gpu_nodes), "--pods", str(p12_mixed_pods)]
    code, lines = run(capsys, *argv, "--policy", "bestfit,fgd", "--seeds", "1-3", "--out", str(out))
    assert code == 0
    assert lines[-1].startswith("unallocated_gpu_pct_at_100: ")
    with open(out / "pods_bestfit-fgd.csv") as f:
        assert f.readline().startswith("# simulate fgd --nodes ")
        rows = list(csv.reader(f))
    assert rows[0] == HEADER
    assert rows[0][5:] == [str(k) for k in range(131)]
    assert [(r[1], r[3]) for r in rows[1:]] == [
        ("bestfit", "1"),
        ("bestfit", "2"),
        ("bestfit", "3"),
        ("fgd", "1"),
        ("fgd", "2"),
        ("fgd", "3"),
    ]
    assert all(r[4] == "8" for r in rows[1:])
    assert (out / "pods_bestfit-fgd.png").stat().st_size > 1000


def test_it_compares_with_published_results_when_given(
    capsys, tmp_path, n4_gpu_nodes, p12_mixed_pods
):
    published = tmp_path / "published.csv"
    values = ",".join(str(100 - 0.5 * min(k, 100) / 100 * 10) for k in range(131))
    published.write_text(",".join(HEADER) + f"\npods,05-BestFit,1.3,1,8,{values}\n")
    argv = ["fgd", "--nodes", str(n4_gpu_nodes), "--pods", str(p12_mixed_pods), "--seed", "1"]
    code, lines = run(capsys, *argv, "--policy", "bestfit", "--published", str(published))
    assert code == 0
    summary = next(line for line in lines if line.startswith("summary bestfit"))
    assert "published=5.000" in summary


def test_it_rejects_an_unknown_policy(capsys, n4_gpu_nodes, p12_mixed_pods):
    argv = ["fgd", "--nodes", str(n4_gpu_nodes), "--pods", str(p12_mixed_pods)]
    assert main([*argv, "--policy", "worstfit"]) == 2


def test_it_runs_as_a_module_without_django(n4_gpu_nodes, p12_mixed_pods):
    import subprocess
    import sys

    code = (
        "import sys; from jobs.simulator.cli import main; "
        f"rc = main(['fgd', '--nodes', {str(n4_gpu_nodes)!r}, '--pods', {str(p12_mixed_pods)!r}, "
        "'--policy', 'fgd']); "
        "assert 'django' not in sys.modules, 'the simulator imported Django'; sys.exit(rc)"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("unallocated_gpu_pct_at_100:")


@pytest.mark.parametrize("argv", [["fgd"], ["replay"]])
def test_it_requires_its_inputs(argv):
    with pytest.raises(SystemExit):
        main(argv)


ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"


@pytest.mark.parametrize(
    "trace, clusters, says",
    [
        (ITP_HEADER + "a,0,60,1\n", "a:16x8", "bad cluster spec 'a:16x8'"),
        ("job_id,submission_time,duration\na,0,60\n", "a:1x8xA100", "missing column num_gpu"),
        (ITP_HEADER + "a,0,60,1\nb,5,soon,1\n", "a:1x8xA100", "line 3: could not convert"),
        (None, "a:1x8xA100", "No such file"),
        (ITP_HEADER + "a,0,60,1\n", "a:0x8xA100", "NODES and GPUS of 1 or more"),
        (ITP_HEADER + "a,0,60,1\n", "a:1x-8xA100", "NODES and GPUS of 1 or more"),
        (ITP_HEADER + "a,0,60,0\n", "a:1x8xA100", "line 2: a job needs num_gpu of 1 or more"),
        (ITP_HEADER + "a,0,-60,1\n", "a:1x8xA100", "line 2: a job needs num_gpu of 1 or more"),
        (ITP_HEADER + "a,0,60,1\na,5,60,1\n", "a:1x8xA100", "job_id 'a' appears more than once"),
    ],
)
def test_a_replay_input_it_cannot_use_is_one_line_and_status_2(
    capsys, tmp_path, trace, clusters, says
):
    path = tmp_path / "jobs.csv"
    if trace is not None:
        path.write_text(trace)

    code = main(["replay", "--trace", str(path), "--clusters", clusters, "--policy", "fifo"])

    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("simulate: ") and says in err[0]


@pytest.mark.parametrize(
    "row, says",
    [("p0,-1,100,1,1000", "must be 0 or more"), ("p0,1000,100,1,1500", "at most 1000")],
)
def test_an_fgd_pod_with_impossible_values_is_named_by_line(
    capsys, tmp_path, n4_gpu_nodes, row, says
):
    pods = tmp_path / "pods.csv"
    pods.write_text(f"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,100,1,1000\n{row}\n")

    code = main(["fgd", "--nodes", str(n4_gpu_nodes), "--pods", str(pods), "--policy", "fgd"])

    err = capsys.readouterr().err
    assert code == 2
    assert "line 3" in err and says in err


def test_an_fgd_pod_list_without_its_columns_is_named(capsys, tmp_path, n4_gpu_nodes):
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli\np0,1000\n")

    code = main(["fgd", "--nodes", str(n4_gpu_nodes), "--pods", str(pods), "--policy", "fgd"])

    assert code == 2
    assert "missing columns memory_mib, num_gpu, gpu_milli" in capsys.readouterr().err


@pytest.mark.parametrize("hours", ["-1", "nan", "inf", "soon"])
def test_a_replay_half_life_below_0_or_not_a_number_is_refused(capsys, tmp_path, hours):
    path = tmp_path / "jobs.csv"
    path.write_text(ITP_HEADER + "a,0,60,1\n")

    with pytest.raises(SystemExit) as exit_:
        main(["replay", "--trace", str(path), "--clusters", "a:1x8xA100", "--policy", "mlsched",
              "--half-life-h", hours])  # fmt: skip

    assert exit_.value.code == 2
    assert "--half-life-h" in capsys.readouterr().err


def test_a_replay_with_a_half_life_of_0_runs(capsys, tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(ITP_HEADER + "a,0,60,1\n")

    code = main(["replay", "--trace", str(path), "--clusters", "a:1x8xA100", "--policy",
                 "mlsched", "--half-life-h", "0"])  # fmt: skip

    assert code == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("mean_wait_s: 0.0")
