"""The overview page's panels, read off the metrics (jobs.metrics.collect's figures, as the
reader may see them) with no query of their own: the figures an operator reads first, pivoted
into tables of the things they are about (a cluster's GPUs, the queue, a team, the last day,
the control plane) rather than one table per metric. Every metric is drawn as well, in full,
below them."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings

from jobs import efficiency
from jobs.metrics import Metric, shown
from jobs.models import Family
from jobs.reasons import meaning
from jobs.states import State


class Figures:
    """`figures` by name, each sample found by its labels."""

    def __init__(self, figures: list[Metric]):
        self.by_name = {m.name: m for m in figures}

    def samples(self, name: str) -> list[tuple[dict, float]]:
        return self.by_name[name].samples if name in self.by_name else []

    def total(self, name: str, **match) -> float:
        return sum(v for labels, v in self.samples(name) if matches(labels, match))

    def values(self, name: str) -> list[float]:
        return [v for _, v in self.samples(name)]

    def keyed(self, name: str, *keys: str, **match) -> dict[tuple, float]:
        """The samples matching `match`, summed by the values of their labels `keys`."""
        out: dict[tuple, float] = defaultdict(float)
        for labels, value in self.samples(name):
            if matches(labels, match):
                out[tuple(labels.get(k, "") for k in keys)] += value
        return out


def matches(labels: dict, match: dict) -> bool:
    return all(labels.get(k) == w for k, w in match.items())


@dataclass(frozen=True)
class Glance:
    """One figure of the overview's first line: a title, the figure, a line saying what it
    counts, and whether it wants an operator's attention."""

    title: str
    figure: str
    detail: str
    alarm: bool = False


def glance(figures: list[Metric]) -> list[Glance]:
    """The platform at a glance: GPUs allocated, idle GPUs nothing queued or running could
    use, jobs queued and running, the success rate, the scheduler's last cycle, the agents
    reporting, the nodes down and quarantined and the GPUs running jobs hold idle."""
    read = Figures(figures)
    gpus, allocated = (
        read.total("mlsched_gpus", state="total"),
        read.total("mlsched_gpus", state="allocated"),
    )
    share = f"{allocated / gpus:.0%} of the platform's GPUs" if gpus else "no GPU reported yet"
    fragmented = read.total("mlsched_gpus_fragmented")
    queued = read.total("mlsched_jobs", state=State.QUEUED)
    running = sum(read.total("mlsched_jobs", state=s) for s in (State.SCHEDULED, State.RUNNING))
    rate = read.values("mlsched_job_success_rate")
    cycle_ages = read.values("mlsched_scheduler_last_cycle_age_seconds")
    beats = read.values("mlsched_agent_heartbeat_age_seconds")
    reporting = sum(1 for age in beats if age <= settings.MLSCHED_AGENT_TIMEOUT_S)
    quarantined = read.total("mlsched_nodes_quarantined")
    down = read.total("mlsched_nodes", state="down")
    held_idle = read.total("mlsched_gpus_held_idle")
    tick = settings.CELERY_BEAT_SCHEDULE["placement-cycle"]["schedule"]
    stalled = not cycle_ages or min(cycle_ages) > stall_s()
    return [
        Glance("GPUs allocated", f"{amount(allocated)} of {amount(gpus)}", share),
        Glance("Idle but unusable", f"{amount(fragmented)} GPUs",
               "idle GPUs the queued and running job mix could not use"),
        Glance("Your teams' jobs",
               f"{shown(queued)} queued, {shown(running)} running",
               "scheduled or running count as running"),
        Glance("Success rate", f"{rate[0]:.0%}" if rate else "none ended",
               "succeeded / (succeeded + failed), last day"),
        Glance("Scheduler",
               f"last cycle {min(cycle_ages):.0f} s ago" if cycle_ages else "no cycle yet",
               f"one every {tick:g} s; none for {stall_s():g} s is marked", stalled),
        Glance("Agents", f"{reporting} of {len(beats)} reporting",
               f"silent over {settings.MLSCHED_AGENT_TIMEOUT_S:g} s: no new placements there",
               reporting < len(beats)),
        Glance("Nodes down", shown(down),
               "not ready as their agent reports them, or their cluster's agent silent: no "
               "work is placed there", down > 0),
        Glance("Nodes quarantined", shown(quarantined),
               "cordoned for failing several jobs; the admin's node list says why",
               quarantined > 0),
        Glance("GPUs held idle", amount(held_idle),
               f"held by running jobs whose GPUs have read idle for "
               f"{efficiency.IDLE_SAID_S // 60} minutes or more (where measured)",
               held_idle > 0),
    ]  # fmt: skip


def stall_s() -> float:
    """How long without a cycle marks the scheduler: 30 s, or 10 ticks when longer."""
    return max(30.0, 10 * settings.CELERY_BEAT_SCHEDULE["placement-cycle"]["schedule"])


@dataclass(frozen=True)
class Capacity:
    """One GPU type of one cluster: its GPUs, what is allocated, and its idle GPUs by how
    usable they are (mlsched_gpus and the idle figures)."""

    cluster: str
    gpu_type: str
    total: float
    allocated: float
    idle: float  # whole idle GPUs of nodes that take work
    slivers: float  # free parts of shared GPUs
    largest_block: float  # the most whole idle GPUs on one node
    unusable: float  # idle GPUs the current job mix could not use
    in_maintenance: float
    booked_idle: float

    @property
    def percent(self) -> int:
        """Allocated of all, in whole percent (the bar's width)."""
        return round(100 * self.allocated / self.total) if self.total else 0


def capacity(figures: list[Metric]) -> list[Capacity]:
    """Each cluster's GPU types, in the order /metrics lists them."""
    read = Figures(figures)
    key = ("cluster", "gpu_type")
    total = read.keyed("mlsched_gpus", *key, state="total")
    allocated = read.keyed("mlsched_gpus", *key, state="allocated")
    whole = read.keyed("mlsched_gpus_idle", *key, kind="whole")
    slivers = read.keyed("mlsched_gpus_idle", *key, kind="sliver")
    block = read.keyed("mlsched_gpus_largest_free_block", *key)
    unusable = read.keyed("mlsched_gpus_fragmented", *key)
    maintenance = read.keyed("mlsched_gpus_in_maintenance", *key)
    booked = read.keyed("mlsched_gpus_booked_idle", *key)
    return [
        Capacity(*k, n, allocated.get(k, 0.0), whole.get(k, 0.0), slivers.get(k, 0.0),
                 block.get(k, 0.0), unusable.get(k, 0.0), maintenance.get(k, 0.0),
                 booked.get(k, 0.0))
        for k, n in total.items()
    ]  # fmt: skip


@dataclass(frozen=True)
class Reason:
    code: str
    jobs: int
    meaning: str


def waiting(figures: list[Metric]) -> list[Reason]:
    """The reader's queued jobs by why they wait, the most first, each with what it means."""
    counts = Figures(figures).keyed("mlsched_jobs_queued_by_reason", "reason")
    rows = [Reason(code, int(n), meaning(code)) for (code,), n in counts.items() if n]
    return sorted(rows, key=lambda r: (-r.jobs, r.code))


@dataclass(frozen=True)
class Wait:
    """The queue wait of the jobs of a family or a team started in the last day, for people."""

    of: str
    p50: str
    p95: str
    p99: str
    mean: str


def amount(value: float) -> str:
    """An amount of GPUs or GPU-hours for people: whole, or to at most two decimals ("2.5",
    "0.29"), not a metric's six digits."""
    return shown(value) if float(value).is_integer() else f"{value:.2f}".rstrip("0").rstrip(".")


QUANTILES = (0.5, 0.95, 0.99, "mean")  # as metrics.summary writes them


def waits(
    figures: list[Metric], name: str, label: str, names: dict[str, str] | None = None
) -> list[Wait]:
    """`name`'s quantiles and mean per value of `label` (a family, a tenant) as durations, each
    value called by its name in `names` where it has one."""
    quantiles = Figures(figures).keyed(name, label, "quantile")
    keys = dict.fromkeys(key for key, _ in quantiles)
    return [
        Wait((names or {}).get(key, key), *(efficiency.span(quantiles[key, q]) for q in QUANTILES))
        for key in keys
    ]


LIMITS = ("guaranteed", "borrow_limit")  # of a team's GPU quotas, shown beside their use


@dataclass
class TeamGpus:
    """One team's GPUs of one type: what its running work holds beside its quota there."""

    gpu_type: str
    in_use: float = 0.0
    guaranteed: float | None = None
    borrow_limit: float | None = None


@dataclass
class Team:
    """One of the reader's teams: its GPUs by type, what it held recently as fair share counts
    it, its queue wait and its GPU-hour budget this month."""

    slug: str
    gpus: list[TeamGpus] = field(default_factory=list)
    recent_gpus: float = 0.0
    wait_p95: str = ""
    budget: str = ""


def teams(figures: list[Metric]) -> list[Team]:
    """The reader's teams (those whose quota, use or recent use the figures hold), by slug."""
    read = Figures(figures)
    by_type: dict[str, dict[str, TeamGpus]] = defaultdict(dict)

    def gpus_of(slug: str, flavor: str) -> TeamGpus:
        kind = flavor.removeprefix("gpu:")
        return by_type[slug].setdefault(kind, TeamGpus(kind))

    for labels, value in read.samples("mlsched_tenant_usage"):
        if labels["flavor"].startswith("gpu:"):
            gpus_of(labels["tenant"], labels["flavor"]).in_use = value
    for labels, value in read.samples("mlsched_tenant_quota"):
        if labels["flavor"].startswith("gpu:") and labels["limit"] in LIMITS:
            setattr(gpus_of(labels["tenant"], labels["flavor"]), labels["limit"], value)
    recent = {labels["tenant"]: v for labels, v in read.samples("mlsched_tenant_recent_gpus")}
    p95 = read.keyed("mlsched_queue_wait_seconds_by_tenant", "tenant", quantile=0.95)
    budget = {labels["tenant"]: v for labels, v in read.samples("mlsched_gpu_budget_hours")}
    spent = {labels["tenant"]: v for labels, v in read.samples("mlsched_gpu_budget_spent_hours")}
    # Every team the figures name, a team with CPU quota alone too.
    named = (labels["tenant"] for name in ("mlsched_tenant_usage", "mlsched_tenant_quota")
             for labels, _ in read.samples(name))  # fmt: skip
    slugs = sorted({*by_type, *named, *recent, *(t for (t,) in p95), *budget})
    return [
        Team(
            slug,
            sorted(by_type[slug].values(), key=lambda g: g.gpu_type),
            recent.get(slug, 0.0),
            efficiency.span(p95[(slug,)]) if (slug,) in p95 else "",
            f"{amount(spent.get(slug, 0.0))} of {amount(budget[slug])} GPU-hours"
            if slug in budget
            else "",
        )
        for slug in slugs
    ]


@dataclass(frozen=True)
class Fact:
    title: str
    text: str


def last_day(figures: list[Metric]) -> list[Fact]:
    """What the reader's teams' jobs and attempts did in the last day, a sentence each: how
    jobs finished, how attempts ended, who stopped those requeued, the preemption rate, GPU
    time wasted and right-sizing."""
    read = Figures(figures)
    finished = read.keyed("mlsched_jobs_finished", "outcome")
    ended = read.keyed("mlsched_attempts_ended", "outcome")
    stopped = read.keyed("mlsched_attempts_stopped", "cause")
    rate = read.values("mlsched_preemption_rate")
    sizing = [
        percent(read, "mlsched_cpu_efficiency", "CPU busy"),
        percent(read, "mlsched_gpu_efficiency", "GPUs busy"),
        percent(read, "mlsched_runtime_efficiency", "runtime limits used"),
        f"{read.total('mlsched_memory_unused_gib_hours'):.1f} GiB-hours of memory asked beyond "
        f"the peak",
    ]
    return [
        Fact("Jobs finished", counted(finished, {
            "succeeded": "succeeded", "user_error": "failed by their own code",
            "infra_error": "failed by the infrastructure", "canceled": "canceled"})),
        Fact("Attempts ended", counted(ended)),
        Fact("Stopped to be requeued", counted(stopped) or "none"),
        Fact("Preemption rate", f"{rate[0]:.1%} of attempts started" if rate else "none started"),
        Fact("GPU time wasted",
             f"{read.total('mlsched_wasted_gpu_seconds') / 3600:.1f} GPU-hours reserved "
             f"without useful work"),
        Fact("Right-sizing, attempts ended", "; ".join(sizing)),
    ]  # fmt: skip


def percent(read: Figures, name: str, what: str) -> str:
    """The figure ("CPU busy 45%"), or that nothing was measured (the metric has no sample)."""
    values = read.values(name)
    return f"{what} {values[0]:.0%}" if values else f"{what} not measured"


def counted(counts: dict[tuple, float], words: dict[str, str] | None = None) -> str:
    """ "10 succeeded, 1 failed by their own code": the non-zero counts, in their order."""
    return ", ".join(
        f"{shown(n)} {(words or {}).get(key, key.replace('_', ' '))}"
        for (key,), n in counts.items()
        if n
    )


@dataclass(frozen=True)
class Shard:
    """One scheduler shard's last cycle."""

    name: str
    last_cycle: str  # how long ago, "" before its first
    stalled: bool
    duration: str
    decisions_per_second: str
    placements: str


@dataclass(frozen=True)
class Agent:
    """A cluster's agent: its last report, and its cluster's nodes down of all."""

    cluster: str
    last_report: str
    silent: bool
    nodes: int = 0
    nodes_down: int = 0


def control(figures: list[Metric]) -> tuple[list[Shard], list[Agent]]:
    """The scheduler's shards and the clusters' agents, with their clusters' nodes down, a
    silent one marked."""
    read = Figures(figures)
    age = read.keyed("mlsched_scheduler_last_cycle_age_seconds", "shard")
    seconds = read.keyed("mlsched_scheduler_cycle_seconds", "shard")
    rate = read.keyed("mlsched_scheduler_decisions_per_second", "shard")
    placed = read.keyed("mlsched_scheduler_placements_total", "shard")
    shards = [
        Shard(name, ago(age.get(key)), key not in age or age[key] > stall_s(),
              f"{seconds[key]:.2f} s" if key in seconds else "",
              f"{rate[key]:.0f}" if key in rate else "", shown(placed.get(key, 0)))
        for key in dict.fromkeys([*placed, *age]) for (name,) in [key]
    ]  # fmt: skip
    beats = read.keyed("mlsched_agent_heartbeat_age_seconds", "cluster")
    nodes = read.keyed("mlsched_nodes", "cluster")
    down = read.keyed("mlsched_nodes", "cluster", state="down")
    agents = [
        Agent(cluster, ago(value), value > settings.MLSCHED_AGENT_TIMEOUT_S,
              int(nodes.get((cluster,), 0)), int(down.get((cluster,), 0)))
        for (cluster,), value in beats.items()
    ]  # fmt: skip
    return shards, agents


def ago(seconds: float | None) -> str:
    return "" if seconds is None else f"{efficiency.span(seconds)} ago"


def panels(figures: Iterable[Metric]) -> dict:
    """Every panel, for the template."""
    figures = list(figures)
    shards, agents = control(figures)
    return {
        "glance": glance(figures),
        "capacity": capacity(figures),
        "waiting": waiting(figures),
        "waits_by_family": waits(
            figures, "mlsched_queue_wait_seconds", "family", dict(Family.choices)
        ),
        "teams": teams(figures),
        "last_day": last_day(figures),
        "shards": shards,
        "agents": agents,
    }
