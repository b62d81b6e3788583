"""The demo data `make run` seeds: what a new user tries first runs."""

import pytest
from django.contrib.auth import get_user_model

from clusters.models import Cluster
from jobs import actions, cycle
from jobs.management.commands.seed_demo import examples, recalled, seed
from jobs.models import Family, Job
from jobs.states import State
from quotas.models import PriorityClass, Tenant

pytestmark = pytest.mark.django_db


def demo_job(**changes):
    spec = {"name": "demo", "family": Family.TRAINING, "image": "local", "command": ["true"],
            "cpu_milli": 4000, "memory_mb": 16_000, "gpus": 8, "workers": 2,
            "max_runtime_s": 600, "priority_class": PriorityClass.objects.get(name="normal"),
            **changes}  # fmt: skip
    user = get_user_model().objects.get(username="demo")
    return actions.submit(user, Tenant.objects.get(slug="demo"), spec)[0]


def test_a_gang_over_both_demo_a100_nodes_and_the_shared_t4s_all_run():
    seed()
    Cluster.objects.update(health=Cluster.Health.HEALTHY)  # as its agent reports once up
    gang = demo_job()
    shares = [demo_job(family=Family.EVALUATION, workers=1, gpus=0, gpu_milli=500,
                       gpu_types=["T4"]) for _ in range(8)]  # fmt: skip

    cycle.run_cycle()

    placed = Job.objects.filter(pk__in=[gang.pk, *(s.pk for s in shares)])
    assert set(placed.values_list("state", "pending_reason")) == {(State.SCHEDULED, "")}


def test_it_recalls_the_first_passwords_while_they_still_sign_in(tmp_path):
    credentials = tmp_path / "demo-credentials.txt"
    credentials.write_text(seed())

    assert recalled(credentials) == credentials.read_text()


def test_a_password_changed_since_the_demo_was_created_is_not_shown(tmp_path):
    credentials = tmp_path / "demo-credentials.txt"
    credentials.write_text(seed())
    first = credentials.read_text().split()[4]  # "Demo user:  demo / PASSWORD ..."
    admin = get_user_model().objects.get(username="admin")
    admin.set_password("a new secret")
    admin.save()

    shown = recalled(credentials)

    assert f"demo / {first}  (tenant 'demo')" in shown
    assert "admin / (changed since the demo was created)" in shown
    assert "a new secret" not in shown


def test_a_deleted_credentials_file_says_how_to_set_a_password(tmp_path):
    seed()

    shown = recalled(tmp_path / "demo-credentials.txt")

    assert "not kept any more" in shown and "changepassword" in shown


def test_the_examples_are_checked_as_submissions_and_all_but_the_evaluation_start_at_once():
    seed()
    Cluster.objects.update(health=Cluster.Health.HEALTHY)  # as its agent reports once up
    train, inference, evaluation = examples()

    cycle.run_cycle()

    shards = Job.objects.filter(parent=inference)
    assert (train.family, train.workers, train.gpus) == (Family.TRAINING, 2, 1)
    assert shards.count() == 3 and inference.shards == 4
    started = Job.objects.filter(
        pk__in=[train.pk, inference.pk, *shards.values_list("pk", flat=True)]
    )
    assert set(started.values_list("state", flat=True)) == {State.SCHEDULED}
    evaluation.refresh_from_db()
    assert (
        evaluation.state == State.QUEUED and evaluation.pending_reason == "waiting_for_dependency"
    )
    assert [(d.on_id, d.kind) for d in evaluation.dependency_links.all()] == [(train.pk, "afterok")]
