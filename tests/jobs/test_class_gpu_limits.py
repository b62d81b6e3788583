"""A priority class's limits on the GPUs its work holds at once, set by a platform admin
(Slurm's QOS MaxTRESPerUser and GrpTRES): the cycle keeps a job past one waiting as
`class_gpu_limit`, and the commit re-checks them under the class's lock against the live
allocations, so two schedulers cannot both take a class past its limit."""

import time
from datetime import UTC, datetime

import pytest

from jobs import cycle, snapshot
from jobs.commit import commit_batch
from jobs.models import Job
from jobs.placement import PLACED, place
from jobs.states import State
from quotas.models import PriorityClass
from tests.factories import JobFactory, NodeFactory, PriorityClassFactory, TenantFactory
from tests.jobs.test_commit_limits import commit_both, decided_apart, roomy  # noqa: F401
from tests.quotas.test_priority_classes_api import listed

pytestmark = pytest.mark.django_db


@pytest.fixture
def urgent(db):
    return PriorityClassFactory(name="urgent", value=100, max_gpus_per_user=4, max_gpus=6)


def test_a_users_second_job_at_the_class_waits_for_its_limit(east, alice, alpha, gamma, urgent):
    for i in range(2):
        NodeFactory(cluster=east, name=f"east-{i}", gpu_count=8)
    first = JobFactory(tenant=alpha, owner=alice, gpus=4, priority_class=urgent)
    second = JobFactory(tenant=gamma, owner=alice, gpus=2, priority_class=urgent)
    lower = JobFactory(tenant=alpha, owner=alice, gpus=2)  # the normal class

    cycle.run_cycle()

    states = {job.pk: job for job in Job.objects.all()}
    assert states[first.pk].state == states[lower.pk].state == State.SCHEDULED
    waiting = states[second.pk]
    assert (waiting.state, waiting.pending_reason) == (State.QUEUED, "class_gpu_limit")
    assert waiting.pending_message.endswith(
        "Its submitter holds 4 of the 4 GPUs one user may hold at its priority class; it starts "
        "once enough of their work at that class ends."
    )


def test_two_schedulers_cannot_both_take_a_class_past_its_gpus(roomy, urgent):  # noqa: F811
    one = JobFactory(tenant=TenantFactory(cohort="a"), gpus=4, priority_class=urgent)
    two = JobFactory(tenant=TenantFactory(cohort="b"), gpus=4, priority_class=urgent)
    PriorityClass.objects.filter(pk=urgent.pk).update(max_gpus_per_user=None)

    placed = commit_both(*decided_apart(one, two, roomy))

    assert placed == [one.pk]
    assert Job.objects.get(pk=two.pk).state == State.QUEUED


def test_two_schedulers_cannot_both_take_a_user_past_the_classs_limit(roomy, alice, urgent):  # noqa: F811
    one = JobFactory(tenant=TenantFactory(cohort="a"), owner=alice, gpus=4, priority_class=urgent)
    two = JobFactory(tenant=TenantFactory(cohort="b"), owner=alice, gpus=2, priority_class=urgent)

    placed = commit_both(*decided_apart(one, two, roomy))

    assert placed == [one.pk]


def test_a_limit_lowered_after_the_snapshot_holds_at_the_commit(roomy, urgent):  # noqa: F811
    job = JobFactory(gpus=4, priority_class=urgent)
    placed = [o for o in place(snapshot.load(time.time()).snapshot).outcomes
              if o.status == PLACED]  # fmt: skip

    PriorityClass.objects.filter(pk=urgent.pk).update(max_gpus=2)

    assert commit_batch(placed, datetime.now(tz=UTC)) == set()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_the_classes_api_says_what_the_classs_work_and_yours_hold(east, alice, bob, alpha,
                                                                 urgent):  # fmt: skip
    for i in range(2):
        NodeFactory(cluster=east, name=f"east-{i}", gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, gpus=3, priority_class=urgent)
    JobFactory(tenant=alpha, owner=bob, gpus=2, priority_class=urgent)
    JobFactory(tenant=alpha, owner=alice, gpus=1)  # the normal class
    cycle.run_cycle()

    ranks = {c["name"]: c for c in listed(alice).json()["priority_classes"]}

    assert (ranks["urgent"]["gpus_held"], ranks["urgent"]["your_gpus_held"]) == (5, 3)
    assert (ranks["normal"]["gpus_held"], ranks["normal"]["your_gpus_held"]) == (1, 1)


def test_the_quotas_page_lists_the_classes_with_their_limits_and_what_they_hold(
    east, alice, alpha, urgent, client
):
    NodeFactory(cluster=east, name="east-0", gpu_count=8)
    JobFactory(tenant=alpha, owner=alice, gpus=3, priority_class=urgent)
    cycle.run_cycle()
    client.force_login(alice)

    page = client.get("/quotas/").content.decode()

    table = page[page.index('id="priority-classes"') :]
    assert ("<tr><td>urgent</td><td>100</td><td>no</td><td>-</td><td>4</td><td>6</td>"
            "<td>3</td><td>3</td><td>-</td></tr>") in table  # fmt: skip
