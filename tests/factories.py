"""Factories for the app tests, named by what they build."""

import factory
from django.contrib.auth import get_user_model

from clusters.backends.base import SPEC_FIELDS
from clusters.models import Cluster, Node
from jobs.models import Attempt, Family, Job
from quotas.models import Membership, PriorityClass, Quota, Tenant, TenantVolume


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("password")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ["slug"]

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    tenant = factory.SubFactory(TenantFactory)
    user = factory.SubFactory(UserFactory)
    role = Membership.Role.MEMBER


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    tenant = factory.SubFactory(TenantFactory)
    flavor = "gpu:A100"
    guaranteed = 8
    borrow_limit = 0


class PriorityClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PriorityClass
        django_get_or_create = ["name"]

    name = "normal"
    value = 0


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster

    name = factory.Sequence(lambda n: f"cluster-{n}")
    health = Cluster.Health.HEALTHY  # as once its agent has reported
    agent_spec_fields = list(SPEC_FIELDS)  # an agent of this release


class NodeFactory(factory.django.DjangoModelFactory):
    """An 8 x A100 node unless told otherwise."""

    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"node-{n}")
    cpu_milli = 96_000
    memory_mb = 1_024_000
    gpu_type = "A100"
    gpu_count = 8


class JobFactory(factory.django.DjangoModelFactory):
    """A one-worker, one-GPU training job."""

    class Meta:
        model = Job

    tenant = factory.SubFactory(TenantFactory)
    owner = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"job-{n}")
    family = Family.TRAINING
    image = "python:3.11"
    command = ["python", "train.py"]
    cpu_milli = 4000
    memory_mb = 16_000
    gpus = 1
    priority_class = factory.SubFactory(PriorityClassFactory)
    max_runtime_s = 3600


class AttemptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Attempt

    job = factory.SubFactory(JobFactory)
    number = 1
    cluster = factory.SubFactory(ClusterFactory)
    # Its job's whole gang, as the commit starts a rigid one (an elastic one: say fewer).
    workers = factory.SelfAttribute("job.workers")


class TenantVolumeFactory(factory.django.DjangoModelFactory):
    """A tenant's data volume with both a claim and a host folder, on every cluster unless
    `clusters=[...]` is given."""

    class Meta:
        model = TenantVolume
        skip_postgeneration_save = True

    tenant = factory.SubFactory(TenantFactory)
    name = "imagenet"
    claim = factory.LazyAttribute(lambda volume: f"{volume.name}-pvc")
    host_path = factory.LazyAttribute(lambda volume: f"/srv/data/{volume.name}")

    @factory.post_generation
    def clusters(self, create, extracted, **kwargs):
        if create and extracted:
            self.clusters.set(extracted)
