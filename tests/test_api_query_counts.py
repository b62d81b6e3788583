"""What the users' REST API costs as the platform grows: every GET call the OpenAPI document
names asks the database as many queries, as a team's owner and as a platform admin, on a
platform of one of each kind of row as on one of several of each (jobs in every state, bigger
gangs and batches, longer dependency lists and logs, more attempts, members, teams, secrets,
volumes, windows, bookings, tokens, nodes, clusters, classes, rates, quotas and sign-ins). A
count that grows with the rows is a query per row (an N+1). The portal's pages are swept the
same way (tests/test_portal_query_counts.py)."""

import re
from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.cache import caches
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from clusters.models import Booking, Cluster, MaintenanceWindow
from jobs import actions, cycle, rollup
from jobs.dependencies import Wait
from jobs.models import Attempt, GpuTypeUsageDay, Job, LogChunk, UsageDay
from jobs.serializers import PREEMPTIBLE_BY_DEFAULT
from quotas import tenant_secrets, tokens
from quotas.models import Membership, PriorityClass, Rate, SignIn, Tenant
from tests.factories import (
    AttemptFactory,
    ClusterFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    TenantFactory,
    TenantVolumeFactory,
    UserFactory,
)
from tests.test_api_bad_input import operations, platform  # noqa: F401 (a fixture)
from tests.test_openapi import SPEC, root, world  # noqa: F401 (fixtures)

Outcome = Attempt.Outcome
DAY = timedelta(days=1)

# The kinds of job whose own calls and page are asked: a running gang, a batch, a job waiting
# for others, one that failed after retries.
JOB_KINDS = ("gang", "batch", "waiting", "retried")
# Beside every GET of the document: the parameters that change what a list reads for each row
# (a filter alone narrows the rows, read as the list's).
API_VARIANTS = ["/api/v1/jobs/?fold=1", "/api/v1/jobs/?batch={batch}",
                "/api/v1/usage/?by_label=project&by_user=1&by_class=1"]  # fmt: skip


class Platform:
    """The platform, grown a size at a time: `grow(n)` adds about n of every kind of row the
    API's calls and the portal's pages list, and jobs whose own rows (a gang's workers,
    attempts and log lines, a batch's shards, a job's dependencies) number about n. `ids`: the
    jobs of the last growth a job's calls and page are asked about, by kind (JOB_KINDS); the
    platform admin, in no team, reads them through a grant on each, as an outsider."""

    def __init__(self, alice, bob, admin):
        self.alice, self.bob, self.admin = alice, bob, admin
        self.alpha = Tenant.objects.get(slug="alpha")
        self.east = Cluster.objects.get(name="east")
        self.normal = PriorityClass.objects.get(name="normal")
        self.round = 0
        self.ids: dict[str, int] = {}
        self.outside: tuple = ()  # the last team Alice is not in, and its owner

    def grow(self, n: int) -> None:
        self.round += 1
        self.infrastructure(n)
        self.teams(n)
        self.jobs(n)
        self.past_usage(n)
        for pk in self.ids.values():
            assign_perm("view_job", self.admin, Job.objects.get(pk=pk))

    def infrastructure(self, n: int) -> None:
        """A cluster of 2n nodes (one cordoned), a quarantined node, one down and one of shared
        GPUs of a type of its own under maintenance; n more nodes in east; n maintenance windows
        to come, and n bookings for alpha and for another team."""
        cluster = ClusterFactory(name=f"west-{self.round}")
        nodes = [NodeFactory(cluster=cluster, features=["ib"], topology={"rack": f"r{i % 2}"})
                 for i in range(2 * n)]  # fmt: skip
        NodeFactory.create_batch(n, cluster=self.east)
        actions.set_schedulable([nodes[-1].pk], False, "root", "bad DIMM")
        now = timezone.now()
        NodeFactory(cluster=cluster, quarantined_at=now, quarantine_reason="3 faults")
        NodeFactory(cluster=cluster, healthy=False, not_ready_reason="kubelet down")
        shared = NodeFactory(cluster=cluster, gpu_type=f"L{self.round}", gpu_count=2,
                             gpu_shareable=True)  # fmt: skip
        begun = MaintenanceWindow.objects.create(cluster=cluster, starts_at=now - DAY,
                                                 ends_at=now + DAY)  # fmt: skip
        begun.nodes.set([shared])
        for i in range(n):
            window = MaintenanceWindow.objects.create(
                cluster=cluster, starts_at=now + (2 + i) * DAY, ends_at=now + (3 + i) * DAY,
                reason="new PSUs")  # fmt: skip
            window.nodes.set(nodes[:2])
            for tenant in (self.alpha, TenantFactory()):
                booking = Booking.objects.create(tenant=tenant, cluster=cluster,
                                                 starts_at=now + (5 + i) * DAY,
                                                 ends_at=now + (6 + i) * DAY)  # fmt: skip
                booking.nodes.set(nodes[:1])

    def teams(self, n: int) -> None:
        """n teams Alice is in (an owner, a member, a viewer in turn; paused) and n she is not
        in (in cohorts of their own); in alpha n more members, quotas, rates, volumes and
        secrets of each kind; n classes open to alpha, changes of the rate card to come, tokens
        of Alice's and root's, Alice's sign-ins and entries of the history."""
        self.alpha.quotas.filter(flavor="gpu:A100").update(guaranteed=F("guaranteed") + 64 * n)
        roles = [Membership.Role.OWNER, Membership.Role.MEMBER, Membership.Role.VIEWER]
        for i in range(n):
            tag = f"{self.round}-{i}"
            rank = PriorityClass.objects.create(name=f"class-{tag}", value=100 * self.round + i)
            rank.tenants.set([self.alpha])
            self.team(self.alice, roles[i % 3], rank, placements_paused="an incident")
            owner = UserFactory()
            self.outside = (self.team(owner, roles[0], rank, cohort=f"cohort-{tag}"), owner)
            MembershipFactory(tenant=self.alpha, user=UserFactory(), role=roles[i % 3])
            tenant_secrets.put(self.alpha, f"KEY_{self.round}_{i}", "v", by=self.alice)
            tenant_secrets.put(self.alpha, f"FILE_{self.round}_{i}", "v", as_file=True)
            tenant_secrets.put(self.alpha, f"PULL_{self.round}_{i}", "v", by=self.alice,
                               registry=f"r{tag}.example.com", username="bot")  # fmt: skip
            TenantVolumeFactory(tenant=self.alpha, name=f"data-{tag}", clusters=[ClusterFactory()])
            QuotaFactory(tenant=self.alpha, flavor=f"gpu:T{tag}")
            Rate.objects.create(flavor=f"gpu:T{tag}", price=Decimal("1.5"))
            Rate.objects.create(
                flavor="gpu:A100",
                price=Decimal(3),
                since=timezone.now().date() + (10 * self.round + i) * DAY,
            )
            for user in (self.alice, self.admin):
                tokens.create_token(user, f"ci-{tag}")
            SignIn.objects.create(
                user=self.alice,
                username="alice",
                succeeded=True,
                method=SignIn.Method.PASSWORD,
                address="10.0.0.8",
            )
            LogEntry.objects.log_actions(self.admin.pk, list(self.alpha.quotas.all()), CHANGE,
                                         change_message="raised")  # fmt: skip

    def team(self, user, role: str, rank, **fields) -> Tenant:
        """A team of `user`'s, in `role`, and of a member from a sign-on group, with a quota, a
        volume, a secret, a GPU-hour budget, a spend alert and `rank` its default class."""
        team = TenantFactory(gpu_hours_per_month=100, spend_alert_per_month=1000,
                             max_queued_jobs=500, default_priority_class=rank,
                             **fields)  # fmt: skip
        MembershipFactory(tenant=team, user=user, role=role)
        MembershipFactory(tenant=team, user=UserFactory(), from_group="ml-research")
        QuotaFactory(tenant=team)
        TenantVolumeFactory(tenant=team)
        tenant_secrets.put(team, "WANDB_KEY", "s3cret", by=user)
        return team

    def submit(self, owner=None, tenant=None, **spec) -> int:
        """A one-GPU training job of Alice's in alpha, unless `spec` says otherwise."""
        spec = {**SPEC, "priority_class": self.normal, "gpus": 1, "workers": 1, **spec}
        del spec["tenant"]  # the argument's
        spec.setdefault("preemptible", PREEMPTIBLE_BY_DEFAULT[spec["family"]])  # as a submission's
        return actions.submit(owner or self.alice, tenant or self.alpha, spec)[0].pk

    def jobs(self, n: int) -> None:
        """A gang of n + 1 workers running its (n + 1)th attempt, with log lines; a batch of
        n + 2 shards, one succeeded, one failed, the others placed; a job failed after n
        retries, and its resubmission; n + 1 waiting for a GPU type no node has (one held), n
        to begin later; Bob's n succeeded and n canceled; an elastic gang, one with a deadline,
        one mounting a volume and naming a secret, and a job waiting for the gang, the batch
        and the waiting ones; a job of another team shared with Alice alone."""
        tag, now = self.round, timezone.now()
        gang = self.submit(name=f"gang-{tag}", workers=n + 1, gpus=4)
        batch = self.submit(name=f"embed-{tag}", family="batch_inference", gpus=0,
                            shards=n + 2, max_running_shards=n + 1)  # fmt: skip
        retried = self.submit(name=f"flaky-{tag}", max_retries=n + 1, labels={"sweep": "a"})
        room = [self.submit(name=f"big-{tag}", gpu_types=["H100"], labels={"i": str(i)})
                for i in range(n + 1)]  # fmt: skip
        later = [self.submit(name=f"later-{tag}", begin=now + DAY / 24) for _ in range(n)]
        ended = [self.submit(self.bob, name=f"done-{tag}-{i}", singleton=True)
                 for i in range(2 * n)]  # fmt: skip
        self.submit(name=f"due-{tag}", deadline=now + 30 * DAY, notify_requeue=True)
        self.submit(name=f"elastic-{tag}", workers=n + 1, min_workers=1, gpus=2)
        mount = {"name": "imagenet", "path": "/data", "read_only": True}
        self.submit(name=f"reads-{tag}", volumes=[mount], secrets=["HF_TOKEN"], notify_start=True)
        team, owner = self.outside
        theirs = self.submit(owner, team, name=f"theirs-{tag}")
        assign_perm("view_job", self.alice, Job.objects.get(pk=theirs))  # hers alone to see
        cycle.run_cycle()
        self.run_again(gang, retried, n)
        shards = list(Job.objects.get(pk=batch).batch())
        for shard, outcome in zip(shards, (Outcome.SUCCEEDED, Outcome.USER_ERROR), strict=False):
            actions.end_attempt(shard.attempts.get(outcome="").pk, outcome, exit_code=0)
        for pk in ended[:n]:
            actions.end_attempt(Attempt.objects.get(job_id=pk, outcome="").pk, Outcome.SUCCEEDED)
        for pk in ended[n:]:
            actions.cancel(Job.objects.get(pk=pk), "canceled by bob")
        actions.hold(Job.objects.get(pk=room[0]), "alice")
        waits = [Wait(pk, "afterok") for pk in (gang, *room, *later)] + [Wait(batch, "afterany")]
        waiting = self.submit(name=f"after-{tag}", depends_on=waits)
        actions.resubmit(self.alice, Job.objects.get(pk=retried))
        cycle.run_cycle()
        self.ids = {"gang": gang, "batch": batch, "waiting": waiting, "retried": retried}

    def run_again(self, gang: int, flaky: int, n: int) -> None:
        """The gang runs n + 1 times, each attempt writing 3n lines, all but the last
        preempted; the flaky job's n attempts fail on their nodes, each retried, and the next
        fails it."""
        for number in range(n + 1):
            attempt = Attempt.objects.get(job_id=gang, outcome="")
            actions.mark_running(attempt.pk)
            LogChunk.objects.bulk_create(
                LogChunk(attempt=attempt, seq=i, worker=i % (n + 1), text=f"step {i}: loss\n")
                for i in range(3 * n)
            )
            flaky_attempt = Attempt.objects.get(job_id=flaky, outcome="")
            if number < n:
                actions.end_attempt(attempt.pk, Outcome.PREEMPTED, reason="preempted")
                actions.end_attempt(flaky_attempt.pk, Outcome.INFRA_ERROR, reason="Xid 79")
                cycle.run_cycle()
        actions.end_attempt(flaky_attempt.pk, Outcome.USER_ERROR, exit_code=1, reason="exit 1")

    def past_usage(self, n: int) -> None:
        """n jobs of Alice's that ran on each of the last 3 days, the days rolled up again (as
        if for the first time)."""
        now = timezone.now()
        for days in range(1, 4):
            for _ in range(n):
                ran = now - days * DAY
                job = JobFactory(tenant=self.alpha, owner=self.alice, state="succeeded",
                                 labels={"project": "llm"}, priority_class=self.normal)  # fmt: skip
                Job.objects.filter(pk=job.pk).update(created=ran, finished_at=ran + DAY / 4)
                AttemptFactory(job=job, cluster=self.east, outcome="succeeded",
                               scheduled_at=ran, started_at=ran, ended_at=ran + DAY / 4,
                               gpu_type="A100")  # fmt: skip
        UsageDay.objects.all().delete()
        GpuTypeUsageDay.objects.all().delete()
        rollup.roll_up(now)


def api_urls() -> list[str]:
    """Every GET of the document (a job's, for each kind of job) and API_VARIANTS: templates of
    the jobs' ids."""
    urls = []
    for path, method, *_ in operations():
        if method == "get":
            path = path.replace("{slug}", "alpha")
            urls += [path.replace("{id}", "{" + kind + "}") for kind in JOB_KINDS] if (
                "{id}" in path) else [path]  # fmt: skip
    return urls + API_VARIANTS


def shape(sql: str) -> str:
    """A query with its values blanked: the same query for another row."""
    return re.sub(r"IN \([?, ]+\)", "IN (...)", re.sub(r"'[^']*'|\b\d+\b", "?", sql))


def queries_of(client, url: str) -> dict[str, list[str]]:
    """The SQL of a GET of `url` asked with the caches emptied ("cold": the platform's metrics
    and the line's standing computed again), then asked again ("warm"), each answer read to its
    end."""
    asked = {}
    for cache in caches.all():
        cache.clear()
    for ask in ("cold", "warm"):
        with CaptureQueriesContext(connection) as captured:
            answer = client.get(url)
            if answer.streaming:
                b"".join(answer.streaming_content)
        assert answer.status_code < 500, (url, answer.status_code)
        asked[ask] = [query["sql"] for query in captured]
    return asked


def measured(clients: dict, templates: list[str], ids: dict) -> dict:
    """Each (user, template, ask)'s SQL, the template filled with `ids`."""
    return {(who, template, ask): sql
            for who, client in clients.items() for template in templates
            for ask, sql in queries_of(client, template.format(**ids)).items()}  # fmt: skip


def growth(before: dict, after: dict) -> list[str]:
    """Each ask whose count changed, with both counts and the shapes of the queries it asks
    more."""
    grown = []
    for key, sql in after.items():
        if len(sql) != len(before[key]):
            more = Counter(map(shape, sql)) - Counter(map(shape, before[key]))
            grown.append(
                f"{' '.join(key)}: {len(before[key])} -> {len(sql)}\n"
                + "\n".join(f"  {times} x {query[:400]}" for query, times in more.most_common(5))
            )
    return grown


def sweep(grown: "Platform", clients: dict, templates: list[str]) -> list[str]:
    """What `growth` finds in the asks of `templates` by each of `clients` (by username)
    between the platform grown once and the same grown again."""
    grown.grow(1)
    before = measured(clients, templates, grown.ids)
    grown.grow(2)
    return growth(before, measured(clients, templates, grown.ids))


@pytest.fixture
def grown(platform, alice, bob, root, settings):  # noqa: F811
    """The platform to grow: the one the API's bad input is sent to (a running gang), its
    retries placed at once."""
    settings.MLSCHED_RETRY_BACKOFF_S = 0
    return Platform(alice, bob, root)


def test_no_call_of_the_api_asks_more_queries_as_the_platform_grows(grown, alice, root):  # noqa: F811
    clients = {}
    for user in (alice, root):
        clients[user.username] = APIClient()
        clients[user.username].force_authenticate(user)

    grew = sweep(grown, clients, api_urls())

    assert not grew, "\n".join(grew)
