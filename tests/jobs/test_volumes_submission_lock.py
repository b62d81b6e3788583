"""A submission's volumes are checked again under its tenant's row lock, which the admin
takes to delete a volume or make it read only: a volume deleted, or made read only, after the
serializer's check refuses the submission, nothing written."""

import pytest
from rest_framework.exceptions import ValidationError

from jobs import actions
from jobs.api import submission
from jobs.models import Job
from tests.factories import TenantVolumeFactory
from tests.jobs.test_api import SPEC, normal_priority  # noqa: F401

pytestmark = pytest.mark.django_db


def checked(rf, user, mounts) -> tuple:
    """The tenant and spec a submission passes its serializer with."""
    request = rf.post("/api/v1/jobs/")
    request.user, request.data = user, {**SPEC, "volumes": mounts}
    return submission(request)


def test_a_volume_deleted_after_the_check_refuses_the_submission(alice, alpha, rf):
    made = TenantVolumeFactory(tenant=alpha)
    tenant, spec = checked(rf, alice, [{"name": "imagenet", "path": "/data"}])
    made.delete()  # between the check and the write

    with pytest.raises(ValidationError) as refused:
        actions.submit(alice, tenant, spec)

    assert "has no volume 'imagenet'" in str(refused.value.detail["volumes"])
    assert not Job.objects.exists()


def test_a_volume_made_read_only_after_the_check_refuses_a_job_writing_to_it(alice, alpha, rf):
    made = TenantVolumeFactory(tenant=alpha, writable=True)
    tenant, spec = checked(rf, alice, [{"name": "imagenet", "path": "/data", "read_only": False}])
    made.writable = False
    made.save(update_fields=["writable"])

    with pytest.raises(ValidationError) as refused:
        actions.submit(alice, tenant, spec)

    assert "read only" in str(refused.value.detail["volumes"])
    assert not Job.objects.exists()
