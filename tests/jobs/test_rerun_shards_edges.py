"""Edges of rerunning some shards of an ended batch: a rerun batch's first job need not be
shard 0, and what the command line says of a batch's default shard holds for it too."""

import subprocess
import sys

from tests.jobs.test_cli import ROOT


def logs_help() -> str:
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "logs", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return " ".join(out.stdout.split())  # argparse wraps the help: one line to read


def test_the_logs_help_does_not_promise_shard_0_of_a_rerun_batch():
    # `logs ID` of a rerun of shards 1 and 3 shows shard 1's (its first job's), as the README
    # and the command's own note on stderr say; the --shard help said "default: shard 0".
    help_text = logs_help()

    assert "default: shard 0" not in help_text or "lowest" in help_text
