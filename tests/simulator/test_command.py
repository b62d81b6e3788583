"""``manage.py simulate`` hands its arguments to the simulator's command line."""

import pytest
from django.core.management import CommandError, call_command


def test_it_runs_the_fgd_protocol(capsys, n4_gpu_nodes, p12_mixed_pods):
    call_command(
        "simulate",
        "fgd",
        "--nodes",
        str(n4_gpu_nodes),
        "--pods",
        str(p12_mixed_pods),
        "--policy",
        "fgd",
    )
    assert (
        capsys.readouterr().out.strip().splitlines()[-1].startswith("unallocated_gpu_pct_at_100:")
    )


def test_it_fails_with_the_simulators_status(n4_gpu_nodes, p12_mixed_pods):
    with pytest.raises(CommandError):
        call_command(
            "simulate",
            "fgd",
            "--nodes",
            str(n4_gpu_nodes),
            "--pods",
            str(p12_mixed_pods),
            "--policy",
            "nope",
        )
