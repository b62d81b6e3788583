"""Tenants' data volumes in the admin: platform admins (superusers) add, change and delete
every tenant's; a tenant admin (staff owning alpha) sees their own tenants' and changes none. A
volume that jobs not yet ended mount is not deleted, nor made read only while they write to it:
the admin is told which jobs, nothing written."""

import pytest
from django.contrib.admin.models import DELETION, LogEntry

from jobs.states import State
from quotas.models import TenantVolume
from tests.factories import ClusterFactory, JobFactory, TenantVolumeFactory
from tests.quotas.admin_pages import delete_selected, said, tenant_admin_of

pytestmark = pytest.mark.django_db

VOLUMES = "/admin/quotas/tenantvolume/"


@pytest.fixture
def tenant_admin(alice):
    """Alice, owner of alpha, as staff holding every model permission the admin asks for."""
    return tenant_admin_of(alice, "tenantvolume")


def fields(tenant, **changes) -> dict:
    return {"tenant": tenant.pk, "name": "imagenet", "description": "", "claim": "imagenet-pvc",
            "host_path": "", "clusters": [], **changes}  # fmt: skip


def mounting(tenant, name="imagenet", state=State.QUEUED, read_only=True):
    mounts = [{"name": name, "path": "/data", "read_only": read_only}]
    return JobFactory(tenant=tenant, state=state, volumes=mounts)


def test_a_platform_admin_adds_a_volume_on_some_clusters(platform_admin, alpha):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")

    page = platform_admin.get(f"{VOLUMES}add/")
    added = platform_admin.post(
        f"{VOLUMES}add/", fields(alpha, writable="on", clusters=[east.pk, west.pk])
    )

    assert 'class="selectfilter"' in page.text or "selectfilter" in page.text  # filter_horizontal
    assert added.status_code == 302, added.text
    made = TenantVolume.objects.get(tenant=alpha, name="imagenet")
    assert (made.claim, made.writable) == ("imagenet-pvc", True)
    assert set(made.clusters.values_list("name", flat=True)) == {"east", "west"}


def test_a_volume_with_no_place_is_a_form_error(platform_admin, alpha):
    refused = platform_admin.post(f"{VOLUMES}add/", fields(alpha, claim=""))

    assert refused.status_code == 200
    assert "A volume names its claim, its host folder, or both." in refused.text
    assert not TenantVolume.objects.exists()


def test_the_list_shows_name_tenant_claim_host_path_access_and_clusters(platform_admin, alpha):
    TenantVolumeFactory(
        tenant=alpha,
        name="imagenet",
        clusters=[ClusterFactory(name="west"), ClusterFactory(name="east")],
    )
    TenantVolumeFactory(
        tenant=alpha, name="weights", host_path="/srv/weights", claim="", writable=True
    )

    page = platform_admin.get(VOLUMES).text

    for shown in ("imagenet", "Alpha", "imagenet-pvc", "/srv/data/imagenet", "east, west",
                  "weights", "/srv/weights", "every cluster"):  # fmt: skip
        assert shown in page


def test_a_tenant_admin_sees_their_own_tenants_volumes_and_changes_none(tenant_admin, alpha, gamma):
    mine, theirs = (
        TenantVolumeFactory(tenant=alpha, name="imagenet"),
        TenantVolumeFactory(tenant=gamma, name="weights"),
    )

    listing = tenant_admin.get(VOLUMES)
    page = tenant_admin.get(f"{VOLUMES}{mine.pk}/change/")
    changed = tenant_admin.post(f"{VOLUMES}{mine.pk}/change/", fields(alpha, writable="on"))

    assert "imagenet" in listing.text and "weights" not in listing.text
    assert page.status_code == 200 and 'name="claim"' not in page.text  # read only
    assert changed.status_code == 403
    assert tenant_admin.get(f"{VOLUMES}{theirs.pk}/change/").status_code == 302  # not found
    assert tenant_admin.get(f"{VOLUMES}add/").status_code == 403
    assert tenant_admin.post(f"{VOLUMES}{mine.pk}/delete/", {"post": "yes"}).status_code == 403
    assert not TenantVolume.objects.get(pk=mine.pk).writable


def test_a_volumes_name_and_tenant_are_kept_on_change(platform_admin, alpha, gamma):
    made = TenantVolumeFactory(tenant=alpha, name="imagenet")

    changed = platform_admin.post(
        f"{VOLUMES}{made.pk}/change/",
        fields(gamma, name="renamed", claim="other-pvc", host_path="/srv/other"),
    )

    made.refresh_from_db()
    assert changed.status_code == 302
    assert (made.tenant, made.name, made.claim, made.host_path) == (
        alpha, "imagenet", "other-pvc", "/srv/other"
    )  # fmt: skip


def test_deleting_a_volume_a_live_job_mounts_keeps_it_and_says_which_job(platform_admin, alpha):
    made = TenantVolumeFactory(tenant=alpha)
    job = mounting(alpha, state=State.RUNNING)

    refused = platform_admin.post(f"{VOLUMES}{made.pk}/delete/", {"post": "yes"})

    assert refused.status_code == 302 and refused.url == f"{VOLUMES}{made.pk}/change/"
    [message] = said(refused)
    assert message.startswith("Not deleted. Jobs not yet ended mount the volume 'imagenet'")
    assert f"({job.pk})" in message
    assert TenantVolume.objects.filter(pk=made.pk).exists()
    assert not LogEntry.objects.filter(action_flag=DELETION).exists()


def test_deleting_a_volume_only_ended_or_other_jobs_mount_deletes_it(platform_admin, alpha, gamma):
    made = TenantVolumeFactory(tenant=alpha)
    mounting(alpha, state=State.SUCCEEDED)
    mounting(gamma)  # another team's volume of the name
    mounting(alpha, name="weights")

    deleted = platform_admin.post(f"{VOLUMES}{made.pk}/delete/", {"post": "yes"})

    assert deleted.status_code == 302 and deleted.url == VOLUMES
    assert not TenantVolume.objects.exists()


def test_deleting_selected_volumes_deletes_the_free_ones_and_names_the_job_keeping_one(
    platform_admin, alpha
):
    kept, free = (
        TenantVolumeFactory(tenant=alpha, name="imagenet"),
        TenantVolumeFactory(tenant=alpha, name="weights"),
    )
    job = mounting(alpha, "imagenet")

    refusal, success = delete_selected(platform_admin, VOLUMES, [kept, free])

    assert list(TenantVolume.objects.values_list("name", flat=True)) == ["imagenet"]
    assert "imagenet of Alpha not deleted" in refusal and f"({job.pk})" in refusal
    assert success == "Deleted 1 volume."
    assert LogEntry.objects.get(action_flag=DELETION).object_id == str(free.pk)


def test_a_volume_live_jobs_write_to_stays_writable_until_they_end(platform_admin, alpha):
    made = TenantVolumeFactory(tenant=alpha, writable=True)
    writer = mounting(alpha, read_only=False)
    mounting(alpha)  # reads it only: no reason to keep it writable

    refused = platform_admin.post(f"{VOLUMES}{made.pk}/change/", fields(alpha))
    writer.state = State.FAILED
    writer.save(update_fields=["state"])
    done = platform_admin.post(f"{VOLUMES}{made.pk}/change/", fields(alpha))

    assert refused.status_code == 200
    assert f"Jobs not yet ended mount the volume &#x27;imagenet&#x27; ({writer.pk})" in refused.text
    assert "read only once they have ended" in refused.text
    assert done.status_code == 302
    made.refresh_from_db()
    assert not made.writable
