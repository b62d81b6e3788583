"""A tenant admin (staff, not a superuser, owner of a tenant) manages their own tenant in the
admin: they see its members, quotas and jobs, and nothing of other tenants; they cannot give
their tenant more than the platform admins gave it. Superusers are the platform admins."""

import pytest
from django.contrib.auth.models import Permission

from clusters.models import Allocation
from jobs.models import Job
from quotas.admin_scope import TENANT_ADMIN_PERMISSIONS
from quotas.models import Membership, PriorityClass, Tenant
from tests.factories import AttemptFactory, JobFactory, NodeFactory, QuotaFactory, UserFactory
from tests.quotas.tenant_form import tenant_fields

pytestmark = pytest.mark.django_db

# What the auth group "tenant admins" holds, and permissions the pages refuse a tenant admin
# whoever gives them: the scope must hold whatever model permissions they are given.
GRANTED = [
    *(name.split(".")[1] for name in TENANT_ADMIN_PERMISSIONS),
    "add_tenant", "add_quota", "change_quota", "delete_quota", "change_priorityclass",
    "change_job",
]  # fmt: skip


@pytest.fixture
def tenant_admin(client, alice):
    """Alice, owner of alpha, as staff holding every model permission the admin asks for."""
    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(*Permission.objects.filter(codename__in=GRANTED))
    client.force_login(alice)
    return client


def job_with_records(tenant, owner, name):
    """A job with an attempt, an event, a log line and an allocation: a row for each admin
    list."""
    job = JobFactory(tenant=tenant, owner=owner, name=name)
    attempt = AttemptFactory(job=job)
    job.events.create(to_state="queued", reason="submitted")
    attempt.log_chunks.create(seq=0, text="a line")
    node = NodeFactory()
    Allocation.objects.create(
        attempt=attempt, node=node, gpu_index=0, gpu_milli=1000, cpu_milli=1000, memory_mb=100
    )
    return job


@pytest.fixture
def gamma_job(gamma, charlie):
    return job_with_records(gamma, charlie, "gamma-secret-run")


def tenant_form(tenant, quotas=(), members=()) -> dict:
    """The tenant change form, with new quota and membership rows."""
    form = {
        **tenant_fields(tenant),
        "quotas-TOTAL_FORMS": str(len(quotas)), "quotas-INITIAL_FORMS": "0",
        "memberships-TOTAL_FORMS": str(len(members)), "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip
    for i, (flavor, guaranteed) in enumerate(quotas):
        form |= {f"quotas-{i}-flavor": flavor, f"quotas-{i}-guaranteed": str(guaranteed),
                 f"quotas-{i}-borrow_limit": "0"}  # fmt: skip
    for i, (user, role) in enumerate(members):
        form |= {f"memberships-{i}-user": str(user.pk), f"memberships-{i}-role": role}
    return form


def test_a_tenant_admin_lists_only_the_tenants_they_own(tenant_admin, alpha, gamma):
    listing = tenant_admin.get("/admin/quotas/tenant/")
    other = tenant_admin.get(f"/admin/quotas/tenant/{gamma.pk}/change/")

    assert "Alpha" in listing.text
    assert "Gamma" not in listing.text
    assert other.status_code == 302  # to the admin's index: "does not exist"


def test_a_tenant_admin_cannot_join_another_tenant(tenant_admin, alice, gamma):
    form = tenant_form(gamma, members=[(alice, Membership.Role.OWNER)])

    tenant_admin.post(f"/admin/quotas/tenant/{gamma.pk}/change/", form)

    assert not gamma.memberships.filter(user=alice).exists()


def test_a_tenant_admin_still_manages_their_own_tenants_members(tenant_admin, alpha, charlie):
    form = tenant_form(alpha, members=[(charlie, Membership.Role.VIEWER)])

    page = tenant_admin.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    assert page.status_code == 302
    assert alpha.memberships.filter(user=charlie, role=Membership.Role.VIEWER).exists()


def test_a_tenant_admin_cannot_raise_their_own_quota(tenant_admin, alpha):
    quota = QuotaFactory(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    change = {"tenant": alpha.pk, "flavor": "gpu:A100", "guaranteed": 64, "borrow_limit": 64}

    tenant_admin.post(f"/admin/quotas/quota/{quota.pk}/change/", change)
    tenant_admin.post(
        f"/admin/quotas/tenant/{alpha.pk}/change/", tenant_form(alpha, quotas=[("cpu", 10**6)])
    )
    tenant_admin.post("/admin/quotas/quota/add/", {**change, "flavor": "memory"})

    quota.refresh_from_db()
    assert (quota.guaranteed, quota.borrow_limit) == (8, 0)
    assert list(alpha.quotas.values_list("flavor", flat=True)) == ["gpu:A100"]


def test_a_tenant_admin_cannot_raise_their_tenants_fair_share(tenant_admin, alpha):
    form = {**tenant_form(alpha), "fair_share_weight": "100", "cohort": "big"}

    tenant_admin.post(f"/admin/quotas/tenant/{alpha.pk}/change/", form)

    alpha.refresh_from_db()
    assert (alpha.fair_share_weight, alpha.cohort) == (1.0, "default")


def test_a_tenant_admin_cannot_create_a_tenant(tenant_admin):
    form = {**tenant_form(Tenant(name="Mine", slug="mine"), quotas=[("gpu:A100", 1000)])}

    tenant_admin.post("/admin/quotas/tenant/add/", form)

    assert not Tenant.objects.filter(slug="mine").exists()


def test_a_tenant_admin_cannot_delete_their_tenant(tenant_admin, alpha):
    alice = alpha.memberships.get(role=Membership.Role.OWNER).user
    alice.user_permissions.add(Permission.objects.get(codename="delete_tenant"))

    tenant_admin.post(f"/admin/quotas/tenant/{alpha.pk}/delete/", {"post": "yes"})

    assert Tenant.objects.filter(pk=alpha.pk).exists()


def test_a_tenant_admin_cannot_open_a_preempting_class_to_their_tenant(tenant_admin, alpha):
    urgent = PriorityClass.objects.create(name="urgent", value=100, may_preempt=True)
    form = {"name": "urgent", "value": "100", "may_preempt": "on", "tenants": [alpha.pk]}

    tenant_admin.post(f"/admin/quotas/priorityclass/{urgent.pk}/change/", form)

    assert not urgent.open_to(alpha)


def test_a_tenant_admin_is_not_shown_which_other_tenants_a_class_is_open_to(tenant_admin, gamma):
    urgent = PriorityClass.objects.create(name="urgent", value=100, may_preempt=True)
    urgent.tenants.add(gamma)

    page = tenant_admin.get(f"/admin/quotas/priorityclass/{urgent.pk}/change/")

    assert page.status_code == 200
    assert "Gamma" not in page.text


@pytest.mark.parametrize(
    "model", ["jobs/job", "jobs/attempt", "jobs/jobevent", "jobs/logchunk", "clusters/allocation"]
)
def test_a_tenant_admin_lists_no_records_of_other_tenants_jobs(
    tenant_admin, alpha, alice, gamma_job, model
):
    job_with_records(alpha, alice, "alpha-own-run")

    listing = tenant_admin.get(f"/admin/{model}/")

    assert listing.status_code == 200
    assert "gamma-secret-run" not in listing.text
    assert "Gamma" not in listing.text  # nor the tenant's name, in the filters
    assert "alpha-own-run" in listing.text


def test_a_tenant_admin_cannot_open_or_cancel_another_tenants_job(tenant_admin, gamma_job):
    page = tenant_admin.get(f"/admin/jobs/job/{gamma_job.pk}/change/")
    tenant_admin.post(
        "/admin/jobs/job/", {"action": "cancel_jobs", "_selected_action": [gamma_job.pk]}
    )

    assert page.status_code == 302
    assert Job.objects.get(pk=gamma_job.pk).state == "queued"


def test_a_platform_admin_still_sees_every_tenant(client, alpha, gamma, gamma_job):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    assert "Gamma" in client.get("/admin/quotas/tenant/").text
    assert "gamma-secret-run" in client.get("/admin/jobs/job/").text
