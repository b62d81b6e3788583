"""A batch's page heads with the batch's state, as its job-end notification reports it (failed
when any shard failed), not with its first shard's alone."""

import re

import pytest
from django.test import Client

from jobs.states import State
from tests.jobs.test_rerun_shards import ended, normal, room  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def heading_state(page: str) -> str:
    return re.search(r'<span id="state"[^>]*>([^<]*)</span>', page).group(1)


def test_a_batch_whose_shards_failed_is_not_headed_succeeded(alice, ended):  # noqa: F811
    browser = Client()
    browser.force_login(alice)
    ended.refresh_from_db()
    assert ended.state == State.SUCCEEDED  # its first shard; shards 1 and 3 of 5 failed

    page = browser.get(f"/jobs/{ended.pk}/").text

    shards = re.search(r'<span id="shards">(.*?)</span>', page).group(1)
    assert "3 succeeded" in shards and "2 failed" in shards  # in either order
    # Each count lists the batch's shards in that state.
    assert (
        f'href="/?batch={ended.pk}&amp;state=failed" title="List its shards failed">2 failed'
        in (shards)
    )
    assert heading_state(page) == State.FAILED
