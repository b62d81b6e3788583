"""A soak: about forty real jobs of every family, three tenants of one cohort and three priority
classes on two clusters, run to their end by a real scheduler process and one real local-backend
agent per cluster, with the platform's invariants checked on every poll."""

import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from django.db import connection, transaction
from django.db.models import Count, Sum

from clusters.models import GPU_MILLI, Allocation, Node
from jobs import actions
from jobs.models import Attempt, Family, Job, LogChunk
from jobs.serializers import SubmitSerializer
from jobs.states import ACTIVE, TERMINAL, State
from quotas.models import Membership, Quota, Tenant
from quotas.tokens import create_token
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    PriorityClassFactory,
    TenantFactory,
    UserFactory,
)
from tests.faults.whole import assert_whole
from tests.processes import manage, process_env, stop_platform, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
GRACE_S = 2
DEADLINE_S = 150  # a healthy run takes about half a minute on two cores
CLUSTERS = {"east": "2x8xA100", "west": "2x4xT4:shared"}
# tenant -> flavor -> (guaranteed, borrow limit). Vision owns the A100s the others borrow.
QUOTAS = {
    "vision": {"gpu:A100": (16, 0), "gpu:T4": (2, 2)},
    "nlp": {"gpu:A100": (0, 16), "gpu:T4": (4, 4)},
    "speech": {"gpu:A100": (0, 8), "gpu:T4": (2, 2)},
}
Outcome = Attempt.Outcome

# argv: line, seconds, exit code. Prints the line and the job's id, then exits with the code.
SHORT = (
    "import os, sys, time; time.sleep(float(sys.argv[2])); "
    "print(sys.argv[1], os.environ['MLSCHED_JOB_ID'], flush=True); sys.exit(int(sys.argv[3]))"
)
# argv: line, seconds, exit code of the last rank. Every rank waits until all ranks of its
# attempt are up (files in the job's checkpoint directory), so a line proves they ran together.
GANG = """
import os, pathlib, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
here, attempt = pathlib.Path(os.environ["MLSCHED_CHECKPOINT_DIR"]), os.environ["MLSCHED_ATTEMPT"]
(here / f"up-{attempt}-{rank}").touch()
deadline = time.time() + 30
while len(list(here.glob(f"up-{attempt}-*"))) < world:
    if time.time() > deadline:
        sys.exit(90)
    time.sleep(0.05)
time.sleep(float(sys.argv[2]))
print(sys.argv[1], os.environ["MLSCHED_JOB_ID"], f"rank={rank}/{world}", flush=True)
sys.exit(int(sys.argv[3]) if rank == world - 1 else 0)
"""
# argv: line. Waits to be preempted; once resumed (attempt 2 on), prints the line and ends.
LONG = """
import os, sys, time
if os.environ.get("MLSCHED_RESUME") == "1":
    print(sys.argv[1], os.environ["MLSCHED_JOB_ID"], f"rank={os.environ['RANK']}", flush=True)
else:
    print("waiting to be preempted", flush=True)
    time.sleep(600)
"""


@dataclass
class Want:
    """What a job should end as: its state, its last attempt's outcome and exit code, and the
    lines its log must hold (``{id}`` stands for the job's id)."""

    state: str
    outcome: str
    exit_code: int | None
    lines: tuple[str, ...]
    preempted_first: bool = False


class TwoClusters:
    """The scheduler process and one agent process per cluster, against the live server."""

    def __init__(self, url: str, var: Path):
        self.var = var
        env = process_env(MLSCHED_VAR_DIR=var, MLSCHED_STOP_GRACE_S=GRACE_S)
        tokens = {name: ClusterFactory(name=name).rotate_token() for name in CLUSTERS}
        self.scheduler = manage("run_scheduler", "--interval", "0.2", env=env)
        self.agents = [
            manage("run_agent", "--cluster", name, "--url", url, "--inventory", inventory,
                   "--interval", "0.3", env={**env, "MLSCHED_AGENT_TOKEN": tokens[name]})
            for name, inventory in CLUSTERS.items()
        ]  # fmt: skip

    def outputs(self) -> dict[str, str]:
        """What each process wrote, once all are stopped."""
        self.stop()
        names = ["scheduler", *CLUSTERS]
        processes = zip(names, self.processes(), strict=True)
        return {name: p.communicate(timeout=30)[0] for name, p in processes}

    def processes(self):
        return [self.scheduler, *self.agents]

    def stop(self):
        stop_platform(self.processes(), self.var)


@pytest.fixture
def clusters(live_server, tmp_path, settings):
    settings.MLSCHED_STOP_GRACE_S = GRACE_S
    settings.MLSCHED_RETRY_BACKOFF_S = 0.5
    running = TwoClusters(live_server.url, tmp_path)
    assert wait_until(lambda: Node.objects.count() == 4, timeout=30), "no inventory came"
    yield running
    running.stop()


@pytest.fixture
def teams():
    """The three tenants with their quotas, one submitting user each, and the classes."""
    users = {}
    for slug, quotas in QUOTAS.items():
        tenant = TenantFactory(name=slug.title(), slug=slug, cohort="research")
        users[slug] = UserFactory(username=f"{slug}-lead")
        MembershipFactory(tenant=tenant, user=users[slug], role=Membership.Role.OWNER)
        for flavor, (guaranteed, borrow) in quotas.items():
            Quota.objects.create(tenant=tenant, flavor=flavor, guaranteed=guaranteed,
                                 borrow_limit=borrow)  # fmt: skip
    PriorityClassFactory(name="normal", value=0)
    PriorityClassFactory(name="low", value=-100)
    urgent = PriorityClassFactory(name="urgent", value=1000, may_preempt=True)
    urgent.tenants.add(Tenant.objects.get(slug="vision"))
    return users


def spec(tenant, name, family, command, **fields) -> dict:
    """A submission as a client posts it: one worker of 2 cores and 4 GiB unless told."""
    return {"tenant": tenant, "name": name, "family": family, "image": "python:3.11",
            "command": command, "cpu_milli": 2000, "memory_mb": 4096, "max_runtime_s": 600,
            **fields}  # fmt: skip


def submit(user, data: dict) -> Job:
    """Through the API's own checks and verb, without HTTP."""
    submission = SubmitSerializer(data=data, tenants=Tenant.objects.filter(slug=data["tenant"]))
    submission.is_valid(raise_exception=True)
    values = dict(submission.validated_data)
    tenant = values.pop("tenant")
    return actions.submit(user, tenant, values)[0]


def post(url: str, key: str, data: dict) -> Job:
    """Through the REST API over HTTP, with the user's personal token."""
    response = requests.post(f"{url}/api/v1/jobs/", json=data, timeout=30,
                             headers={"Authorization": f"Token {key}"})  # fmt: skip
    assert response.status_code == 201, response.text
    return Job.objects.get(pk=response.json()["id"])


def short(line: str, seconds: float, exit_code: int = 0) -> list[str]:
    return [sys.executable, "-c", SHORT, line, str(seconds), str(exit_code)]


def gang(line: str, seconds: float, last_rank_exit: int = 0) -> list[str]:
    return [sys.executable, "-c", GANG, line, str(seconds), str(last_rank_exit)]


def succeeds(line: str, workers: int = 0, preempted_first: bool = False) -> Want:
    ranks = [f"{line} {{id}} rank={r}/{workers}" for r in range(workers)]
    return Want(State.SUCCEEDED, Outcome.SUCCEEDED, 0, tuple(ranks or [f"{line} {{id}}"]),
                preempted_first)  # fmt: skip


def fails(exit_code: int, *lines: str) -> Want:
    return Want(State.FAILED, Outcome.USER_ERROR, exit_code, lines)


def a100(**fields) -> dict:
    return {"gpu_types": ["A100"], **fields}


def t4(**fields) -> dict:
    return {"gpu_types": ["T4"], **fields}


def training_gangs(users) -> list[tuple[Job, Want]]:
    """Distributed training: gangs of 2 x 8, 2 x 4 and 2 x 2 GPUs, one whose last rank fails.
    The urgent one comes first: it must evict the long low-class job to fit."""
    gangs = [
        ("vision", "hotfix", gang("hotfix trained", 1), a100(gpus=8, priority_class="urgent")),
        ("vision", "resnet-ddp", gang("resnet trained", 1.5), a100(gpus=4)),
        ("nlp", "llm-pretrain", gang("llm trained", 1.5), a100(gpus=8)),
        ("nlp", "bert-finetune", gang("bert trained", 1), a100(gpus=4)),
        ("speech", "conformer", gang("conformer trained", 1), a100(gpus=4)),
        ("nlp", "distill", gang("distilled", 1), t4(gpus=2)),
    ]
    made = [
        (submit(users[who], spec(who, name, Family.TRAINING, command, workers=2, **fields)),
         succeeds(command[3], workers=2))
        for who, name, command, fields in gangs
    ]  # fmt: skip
    bad = gang("bad config", 0.5, last_rank_exit=2)
    job = submit(users["nlp"], spec("nlp", "bad-config", Family.TRAINING, bad, workers=2,
                                    **a100(gpus=2)))  # fmt: skip
    return [*made, (job, fails(2, "bad config {id} rank=1/2"))]


def batches(users) -> list[tuple[Job, Want]]:
    """Batch inference: shards of one whole GPU, on either GPU type."""
    batches = [
        ("vision", "embed", short("embedded", 0.5), 6, a100(gpus=1)),
        ("nlp", "score", short("scored", 1), 4, a100(gpus=1)),
        ("speech", "transcribe", short("transcribed", 0.5), 8, t4(gpus=1)),
    ]
    made = []
    for who, name, command, shards, fields in batches:
        first = submit(users[who], spec(who, name, Family.BATCH_INFERENCE, command,
                                        shards=shards, **fields))  # fmt: skip
        made += [(shard, succeeds(command[3])) for shard in first.batch()]
    return made


def evaluations(url: str, users) -> list[tuple[Job, Want]]:
    """Evaluations on GPU shares of the shareable T4s, posted to the REST API; some exit 3."""
    keys = {who: create_token(user, "soak")[1] for who, user in users.items()}
    made = []
    for i in range(14):
        who = list(QUOTAS)[i % 3]
        exit_code = 3 if i % 5 == 4 else 0
        command = short(f"eval-{i} scored", 0.5 + (i % 4) * 0.5, exit_code)
        data = spec(who, f"eval-{i}", Family.EVALUATION, command,
                    **t4(gpu_milli=250 if i % 2 else 500))  # fmt: skip
        want = fails(3, f"eval-{i} scored {{id}}") if exit_code else succeeds(command[3])
        made.append((post(url, keys[who], data), want))
    return made


def start_long_job(users, tenant: str = "nlp") -> tuple[Job, Want]:
    """A preemptible low-class gang holding every A100, waiting to be preempted. Nlp's borrows
    them; vision's would fill vision's own guarantee (see the last test)."""
    data = spec(tenant, "long-sweep", Family.TRAINING,
                [sys.executable, "-c", LONG, "sweep resumed"],
                workers=2, preemptible=True, priority_class="low", **a100(gpus=8))  # fmt: skip
    job = submit(users[tenant], data)
    running = wait_until(lambda: Job.objects.get(pk=job.pk).state == State.RUNNING, timeout=30)
    assert running, "the long job never ran"
    lines = tuple(f"sweep resumed {{id}} rank={r}" for r in range(2))
    return job, Want(State.SUCCEEDED, Outcome.SUCCEEDED, 0, lines, preempted_first=True)


# ---------------------------------------------------------------- invariants, on every poll


def in_one_snapshot(check):
    """Run ``check`` on one consistent view of the database, as the scheduler's snapshot reads
    it: separate READ COMMITTED queries could see an attempt end between two of them."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        return check()


def assert_no_gpu_over_committed() -> None:
    """On every GPU the live shares' milli ranges lie apart inside 0..1000; no node gives more
    CPU or memory than it has."""
    shares = defaultdict(list)
    rows = Allocation.objects.active().exclude(gpu_index=None)
    for node, gpu, start, milli in rows.values_list("node_id", "gpu_index", "gpu_milli_start",
                                                    "gpu_milli"):  # fmt: skip
        shares[node, gpu].append((start, start + milli))
    for (node, gpu), ranges in shares.items():
        ranges.sort()
        assert sum(b - a for a, b in ranges) <= GPU_MILLI, f"GPU {gpu} of node {node}: {ranges}"
        assert all(b <= c for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False)), ranges
        assert ranges[-1][1] <= GPU_MILLI, ranges
    nodes = {n.pk: n for n in Node.objects.all()}
    used = Allocation.objects.active().values("node_id").annotate(
        cpu=Sum("cpu_milli"), mem=Sum("memory_mb"))  # fmt: skip
    for row in used:
        node = nodes[row["node_id"]]
        assert row["cpu"] <= node.cpu_milli and row["mem"] <= node.memory_mb, row
    for node, gpu in shares:
        assert gpu < nodes[node].gpu_count, f"node {node} has no GPU {gpu}"


def assert_gangs_whole() -> None:
    """A live attempt holds every row of every worker; an ended one holds none; no job has two
    live attempts."""
    live = list(Attempt.objects.filter(outcome="").values_list("id", "job_id"))
    jobs = [job for _, job in live]
    assert len(jobs) == len(set(jobs)), f"a job has two live attempts: {sorted(jobs)}"
    held = defaultdict(set)
    for attempt, worker, slot in Allocation.objects.active().values_list(
        "attempt_id", "worker", "slot"
    ):
        held[attempt].add((worker, slot))
    shapes = {j.pk: j for j in Job.objects.filter(pk__in=jobs).only("workers", "gpus")}
    for attempt, job_id in live:
        job = shapes[job_id]
        want = {(w, s) for w in range(job.workers) for s in range(max(job.gpus, 1))}
        assert held.pop(attempt, set()) == want, f"attempt {attempt} holds part of its gang"
    assert not held, f"ended attempts hold allocations: {sorted(held)}"


def assert_tenants_within_quota() -> None:
    """No tenant holds more of a GPU type than its guarantee plus its borrow limit, and the
    cohort no more than its guarantees together."""
    rows = (
        Allocation.objects.active()
        .values_list("attempt__job__tenant__slug", "node__gpu_type")
        .annotate(milli=Sum("gpu_milli"))
    )
    cohort = defaultdict(int)
    for slug, gpu_type, milli in rows:
        flavor = f"gpu:{gpu_type}"
        guaranteed, borrow = QUOTAS[slug][flavor]
        assert milli <= (guaranteed + borrow) * GPU_MILLI, f"{slug} holds {milli} of {flavor}"
        cohort[flavor] += milli
    for flavor, milli in cohort.items():
        assert milli <= sum(q[flavor][0] for q in QUOTAS.values()) * GPU_MILLI, (flavor, milli)


def check_platform() -> int:
    """Every invariant of a platform in motion; the number of jobs running now."""
    assert_no_gpu_over_committed()
    assert_gangs_whole()
    assert_tenants_within_quota()
    assert_whole()  # jobs, attempts, allocations and events agree in every committed state
    return Job.objects.filter(state=State.RUNNING).count()


def run_to_the_end(job_ids: list[int]) -> dict:
    """Poll, checking the invariants each time, until every job is terminal."""
    stats = {"polls": 0, "peak_running": 0}
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        running = in_one_snapshot(check_platform)
        stats["polls"] += 1
        stats["peak_running"] = max(stats["peak_running"], running)
        if not Job.objects.filter(pk__in=job_ids).exclude(state__in=TERMINAL).exists():
            return stats
        time.sleep(0.25)
    live = dict(Job.objects.filter(pk__in=job_ids).exclude(state__in=TERMINAL)
                .values_list("name", "pending_reason"))  # fmt: skip
    pytest.fail(f"jobs still live after {DEADLINE_S} s: {live}")


# ---------------------------------------------------------------- the end


def logs(job: Job) -> list[str]:
    return list(LogChunk.objects.filter(attempt__job=job).values_list("text", flat=True))


def assert_ended_as_wanted(job: Job, want: Want) -> None:
    job.refresh_from_db()
    attempts = list(job.attempts.order_by("number"))
    outcomes = [a.outcome for a in attempts]
    assert job.state == want.state, f"{job.name} #{job.pk}: {job.state}, attempts {outcomes}"
    last = attempts[-1]
    assert (last.outcome, last.exit_code) == (want.outcome, want.exit_code), (job.name, outcomes)
    # Before the last attempt only preemptions (a higher class, or an owner reclaiming its
    # guarantee), which use no retry: a user error is never retried, nothing was lost.
    assert set(outcomes[:-1]) <= {Outcome.PREEMPTED}, (job.name, outcomes)
    assert job.retries_used == 0, (job.name, outcomes)
    if want.preempted_first:
        assert outcomes[0] == Outcome.PREEMPTED and len(outcomes) >= 2, (job.name, outcomes)
    lines = logs(job)
    for line in want.lines:
        assert line.format(id=job.pk) in lines, (job.name, line, lines)


def assert_processes_healthy(outputs: dict[str, str]) -> None:
    """No scheduler tick failed (a constraint the commit ran into would show here), and no
    agent met a traceback."""
    for name, output in outputs.items():
        assert "Traceback" not in output, f"{name}:\n{output[-4000:]}"
        assert "violates" not in output, f"{name}:\n{output[-4000:]}"


def test_a_mixed_workload_on_two_clusters_runs_to_its_end_with_every_invariant_held(
    clusters, teams, live_server
):
    started = time.monotonic()
    wanted = [start_long_job(teams)]
    wanted += training_gangs(teams)
    wanted += batches(teams)
    wanted += evaluations(live_server.url, teams)
    assert len(wanted) == Job.objects.count() >= 40  # shards included; nothing else was made

    stats = run_to_the_end([job.pk for job, _ in wanted])

    for job, want in wanted:
        assert_ended_as_wanted(job, want)
    assert Job.objects.count() == len(wanted)  # no job lost, none made on the way
    assert_whole()
    assert not Allocation.objects.active().exists(), "allocations left after every job ended"
    assert not Attempt.objects.filter(outcome="").exists()
    assert stats["peak_running"] >= 3, stats  # the jobs did run side by side
    by_cluster = dict(Attempt.objects.values_list("cluster__name").annotate(n=Count("id")))
    assert set(by_cluster) == set(CLUSTERS), by_cluster
    assert not Job.objects.filter(state__in=ACTIVE).exists()
    assert_processes_healthy(clusters.outputs())
    print(f"soak: {len(wanted)} jobs, {stats}, {time.monotonic() - started:.1f} s")
