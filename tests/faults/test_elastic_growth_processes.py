"""An elastic gang grows against a real scheduler and agent: started with one worker of two
while another job holds the second node, it is stopped with its grace period once that node
is free, saves its checkpoint on SIGTERM, and runs again with both workers from that
checkpoint, no retry used."""

import pytest

from jobs.models import Attempt, Family
from jobs.states import State
from tests.factories import JobFactory
from tests.faults.test_agent_processes import (  # noqa: F401 - the platform fixture
    GRACE_S,
    Platform,
    logs,
    script,
    wait_for_state,
)

pytestmark = pytest.mark.django_db(transaction=True)

HOLDS_A_NODE = """
    import time
    time.sleep(3)
"""

TRAINS_AND_CHECKPOINTS = """
    import os, pathlib, signal, sys, time
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    saved = pathlib.Path(os.environ["MLSCHED_CHECKPOINT_DIR"]) / "step"
    start = int(saved.read_text()) if saved.exists() else 0
    print(f"attempt={os.environ['MLSCHED_ATTEMPT']} rank={rank} world={world} from={start}",
          flush=True)
    if world == 1:
        step = start
        def checkpoint(*_):
            saved.write_text(str(step))
            print(f"saved step {step}", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, checkpoint)
        while True:
            step += 1
            time.sleep(0.05)
"""


@pytest.fixture
def growing(live_server, tmp_path, settings):
    settings.MLSCHED_STOP_GRACE_S = GRACE_S
    running = Platform(live_server.url, tmp_path, MLSCHED_ELASTIC_GROW_AFTER_S=1)
    yield running
    running.stop()


def test_a_gang_started_smaller_restarts_with_both_workers_from_its_checkpoint(growing, tmp_path):
    holder = JobFactory(family=Family.TRAINING, gpus=8, command=script(tmp_path, HOLDS_A_NODE))
    assert wait_for_state(holder, State.RUNNING)
    gang = JobFactory(
        family=Family.TRAINING, workers=2, min_workers=1, gpus=8, max_retries=0,
        command=script(tmp_path, TRAINS_AND_CHECKPOINTS),
    )  # fmt: skip

    assert wait_for_state(gang, State.RUNNING)
    assert gang.attempts.get().workers == 1
    assert wait_for_state(holder, State.SUCCEEDED) == State.SUCCEEDED

    assert wait_for_state(gang, State.SUCCEEDED, State.FAILED, timeout=90) == State.SUCCEEDED
    first, second = gang.attempts.order_by("number")
    assert (first.outcome, first.stop_cause) == (Attempt.Outcome.PREEMPTED, "grow")
    assert first.reason.startswith("stopped to restart with 2 workers")
    assert second.workers == 2
    gang.refresh_from_db()
    assert (gang.retries_used, gang.attempts.count()) == (0, 2)
    lines = [line.strip() for line in logs(gang)]
    saved = next(int(line.split()[-1]) for line in lines if line.startswith("saved step"))
    assert saved > 0
    resumed = sorted(line for line in lines if line.startswith("attempt=2"))
    assert resumed == [f"attempt=2 rank={r} world=2 from={saved}" for r in (0, 1)]
