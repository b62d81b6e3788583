"""The ``replay`` subcommand: dynamic replay of job traces (arrivals, durations, departures)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub) -> None:
    """Register ``replay`` and its options."""
    r = sub.add_parser("replay", help="replay a job trace with arrivals and departures")
    r.add_argument("--trace", required=True, type=Path, help="ITP 2021 or Philly job CSV")
    r.add_argument("--clusters", required=True, help="e.g. a:16x8xA100,b:32x4xV100")
    r.add_argument("--policy", required=True, help="fifo, priority, fairshare or mlsched")
    r.add_argument("--out", type=Path, help="directory for the report and PNG")


def run(args: argparse.Namespace, command: str) -> int:
    """Run a replay and print its report."""
    print("replay is not implemented in this version", file=sys.stderr)
    return 2
