"""Every call of the agents' API answers input it cannot take with a 4xx, never a 500, and a
call it refuses writes nothing. Each call (inventory, heartbeat, logs: clusters/api.py's
patterns) starts from a body as the agent's client sends it (clusters/agent/client.py), then is
sent bodies that are not objects, each field left out and as every kind of wrong value, and each
field of the first item of its lists (nodes, workers, lines, resume_logs) left out and wrong the
same ways; and heartbeats whose clock and workers' stamps are at opposite ends of time."""

import json
import time
from dataclasses import asdict

import pytest
import yaml

from clusters.backends import base
from clusters.models import Cluster, Node
from jobs.models import Attempt, Job, LogChunk

pytestmark = pytest.mark.django_db(transaction=True)

# The last second a date can hold (9999-12-31), in seconds since the epoch.
END_OF_TIME = 253_402_300_799
# Values of every JSON kind a field may be wrong with, as tests/test_api_bad_input.py's: each
# type, the ends of numbers (and of time), text PostgreSQL cannot store (a NUL, a lone
# surrogate), a date no calendar has, a deep object, text past any field's length.
WRONG = [None, True, -1, 2**63, 1e308, 0.5, END_OF_TIME, "", "x", "\x00", "\ud800", "9" * 40,
         "2026-13-45T25:61:00Z", [], [None], {}, {"a": {"b": [1]}}, "x" * 70_000]  # fmt: skip
# Bodies that are not an object of fields.
NOT_OBJECTS = [[], [1], "x", 1, None, True]


def inventory(attempt: Attempt, now: float) -> dict:
    """The gang's two nodes, as the client reports them, every field said."""
    nodes = [
        base.NodeInventory(f"east-{i}", 96_000, 1_024_000, "A100", 8, False, {"rack": "r1"},
                           True, ("ib",), "")
        for i in range(2)
    ]  # fmt: skip
    return {"nodes": [asdict(n) for n in nodes], "spec_fields": list(base.SPEC_FIELDS)}


def heartbeat(attempt: Attempt, now: float) -> dict:
    """The gang's two ranks running, as the client reports them, every field said."""
    workers = [
        base.WorkerStatus(attempt.pk, rank, base.RUNNING, None, "", checkpoint_at=now - 5,
                          started_at=now - 60, cpu_seconds=12.5, memory_peak_mb=900,
                          gpu_busy_seconds=30.0, gpu_idle_since=now - 1)
        for rank in range(2)
    ]  # fmt: skip
    return {
        "workers": [asdict(w) for w in workers],
        "sent_at": now,
        "spec_fields": list(base.SPEC_FIELDS),
        "usage_epoch": "boot-1",
        "resume_logs": [{"attempt_id": attempt.pk, "rank": 0}],
    }


def logs(attempt: Attempt, now: float) -> dict:
    lines = [base.LogLine(attempt.pk, 0, seq, "stdout", f"step {seq}", at=now) for seq in range(2)]
    return {"lines": [asdict(line) for line in lines]}


SOUND = {"inventory": inventory, "heartbeat": heartbeat, "logs": logs}


def without(body: dict, name: str) -> dict:
    return {key: value for key, value in body.items() if key != name}


def tries(sound: dict):
    """What a call is sent, each with what is wrong in it: the sound body, then each wrong one."""
    yield "sound", sound
    yield from ((f"body {body!r}", body) for body in NOT_OBJECTS)
    for name in sound:
        yield f"{name} left out", without(sound, name)
        yield from ((f"{name} {v!r:.40}", {**sound, name: v}) for v in WRONG)
    for name, items in sound.items():
        if isinstance(items, list) and items and isinstance(items[0], dict):
            first, *rest = items
            for field in first:
                wrong = [(f"{name}[0].{field} left out", without(first, field))]
                wrong += [(f"{name}[0].{field} {v!r:.40}", {**first, field: v}) for v in WRONG]
                yield from ((what, {**sound, name: [item, *rest]}) for what, item in wrong)


def clocks_apart(sound: dict):
    """Heartbeats whose clock ("sent_at") and workers' stamps are at opposite ends of time: the
    stamps are read on the agent's clock."""
    stamps = ["checkpoint_at", "started_at", "gpu_idle_since"]
    for sent_at, stamp in ((1, END_OF_TIME), (END_OF_TIME, 1)):
        workers = [{**w, **dict.fromkeys(stamps, stamp)} for w in sound["workers"]]
        yield (
            f"sent_at {sent_at}, stamps {stamp}",
            {**sound, "sent_at": sent_at, "workers": workers},
        )


def ends_the_gang(sent) -> bool:
    """Whether a heartbeat reports no worker of the running gang (it is then lost): it goes
    last, so that the others' workers reach the checks of a live attempt."""
    _, body = sent
    return isinstance(body, dict) and body.get("workers") == []


def footprint(cluster: Cluster):
    """All a call could write: the cluster's row, its nodes, the attempts, jobs and logs."""
    return (
        list(Cluster.objects.filter(pk=cluster.pk).values()),
        list(Node.objects.order_by("pk").values()),
        list(Attempt.objects.order_by("pk").values()),
        list(Job.objects.order_by("pk").values("state")),
        LogChunk.objects.count(),
    )


@pytest.mark.parametrize("call", SOUND)
def test_no_agent_call_answers_wrong_input_with_a_500(call, agent, gang, east):
    attempt = gang.attempts.get()
    agent.raise_request_exception = False  # a 500 is an answer to count, not an error raised
    url = f"/api/v1/agent/east/{call}/"
    failures, half_written, statuses = [], [], []
    before = footprint(east)
    sound = SOUND[call](attempt, time.time())
    sent = [*tries(sound), *(clocks_apart(sound) if call == "heartbeat" else [])]
    for what, body in sorted(sent, key=ends_the_gang):
        # JSON as the agent writes it: a lone surrogate escaped, as json.dumps does.
        answer = agent.generic("POST", url, json.dumps(body), "application/json")
        after = footprint(east)
        if answer.status_code >= 500:
            failures.append(what)
        elif answer.status_code >= 400 and after != before:
            half_written.append(what)
        statuses.append(answer.status_code)
        before = after

    assert not failures, yaml.safe_dump(failures[:40], width=240)
    assert not half_written, yaml.safe_dump(half_written[:40], width=240)
    # The sound body is taken, and the wrong input reached what reads it.
    assert statuses[0] == 200
    assert 400 in statuses
