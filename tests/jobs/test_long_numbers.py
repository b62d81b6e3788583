"""A whole-number query parameter of the job list, the portal's list and the log API is read
whatever its length: one of thousands of digits, past what Python turns into an int by default
(4,300), is a 400 naming it or stands for the largest id, never a 500."""

import pytest
from rest_framework.test import APIClient

from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

THOUSANDS_OF_DIGITS = "9" * 5000


@pytest.mark.parametrize("name", ["shard", "batch", "before"])
def test_a_job_list_parameter_of_thousands_of_digits_is_no_server_error(alice, alpha, name):
    client = APIClient()
    client.force_authenticate(alice)

    response = client.get(f"/api/v1/jobs/?{name}={THOUSANDS_OF_DIGITS}")

    assert response.status_code in (200, 400)
    if response.status_code == 400:
        assert name in response.json()


@pytest.mark.parametrize("name", ["batch", "before"])
def test_a_portal_list_parameter_of_thousands_of_digits_is_no_server_error(client, alice, name):
    client.force_login(alice)

    response = client.get(f"/?{name}={THOUSANDS_OF_DIGITS}")

    assert response.status_code in (200, 400)


def test_a_log_tail_of_thousands_of_digits_is_a_400_naming_last(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice)
    client = APIClient()
    client.force_authenticate(alice)

    response = client.get(f"/api/v1/jobs/{job.pk}/logs/?last={THOUSANDS_OF_DIGITS}")

    assert response.status_code == 400
    assert "last" in response.json()
