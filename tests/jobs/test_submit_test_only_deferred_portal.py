"""The submit form's "Check when it would start" for a job that would fit now but waits for
its begin: no line of the answer says it starts now."""

from datetime import UTC, datetime, timedelta

import pytest

from tests.factories import ClusterFactory, NodeFactory
from tests.jobs.test_begin import FORM

pytestmark = pytest.mark.django_db


def test_a_job_that_fits_but_waits_for_its_begin_is_not_said_to_start_now(
    client, alice, normal_priority
):
    NodeFactory(cluster=ClusterFactory(name="east"), gpu_type="A100", gpu_count=8)
    begin = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(hours=2)
    client.force_login(alice)

    page = client.post(
        "/jobs/new/", {**FORM, "begin": f"{begin:%Y-%m-%dT%H:%M}", "test_only": "1"}
    ).text

    assert f"It would start by about {begin:%Y-%m-%d %H:%M} UTC." in page
    assert "starts now" not in page
