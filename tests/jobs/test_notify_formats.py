"""A tenant's notifications in the format its URL takes (`Tenant.notify_format`, set by a
platform admin): the JSON document with its line as `text` (Slack, Mattermost, one's own
receiver), an Adaptive Card for a Microsoft Teams Workflows webhook, a message for Discord;
each signed alike."""

# ruff: noqa: F811 (the job-end tests' fixtures, imported, are the tests' arguments)

import pytest

from jobs.models import Attempt
from quotas.models import Tenant
from tests.jobs.test_notify import (  # noqa: F401 (fixtures)
    end,
    hooked,
    queued,
    receiver,
    room,
    running,
    verifies,
)

pytestmark = pytest.mark.django_db
Outcome = Attempt.Outcome


def ended(tenant, alice, capture, name="train-llm"):
    """The job-end notification the tenant's URL receives for a job that failed."""
    job = running(tenant, alice, name=name)
    with capture(execute=True):
        end(job, Outcome.USER_ERROR, exit_code=3, reason="exit code 3")
    return job


@pytest.fixture
def public(settings):
    settings.MLSCHED_PUBLIC_URL = "https://mlsched.example.com/"


def formatted(tenant, form: str) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(notify_format=form)
    tenant.refresh_from_db()


def test_by_default_the_document_carries_its_line_as_text(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks, public
):
    job = ended(hooked, alice, django_capture_on_commit_callbacks)

    (post,) = receiver.received

    assert post.document["event"] == "job.ended"
    assert post.document["text"] == (
        f"Job #{job.pk} train-llm failed: exit code 3 https://mlsched.example.com/jobs/{job.pk}/"
    )


def test_teams_gets_an_adaptive_card_of_its_line_and_facts_with_a_button_and_the_document_beside(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks, public
):
    formatted(hooked, "teams")
    job = ended(hooked, alice, django_capture_on_commit_callbacks)

    (post,) = receiver.received
    (attachment,) = post.document["attachments"]
    card = attachment["content"]

    assert post.document["type"] == "message"
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["type"] == "AdaptiveCard"
    line, fact_set = card["body"]
    assert line == {
        "type": "TextBlock", "text": f"Job #{job.pk} train-llm failed: exit code 3", "wrap": True
    }  # fmt: skip
    facts = {fact["title"]: fact["value"] for fact in fact_set["facts"]}
    assert fact_set["type"] == "FactSet"
    assert (facts["job"], facts["state"], facts["exit_code"]) == (str(job.pk), "failed", "3")
    assert "event" not in facts and "url" not in facts
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open in mlsched",
                                "url": f"https://mlsched.example.com/jobs/{job.pk}/"}]  # fmt: skip
    assert post.document["mlsched"]["state"] == "failed"
    assert verifies(post, hooked.notify_secret)


def test_discord_gets_the_line_as_its_message_mentioning_nobody(
    hooked, alice, room, receiver, queued, django_capture_on_commit_callbacks, public
):
    formatted(hooked, "discord")
    job = ended(hooked, alice, django_capture_on_commit_callbacks, name="@everyone")

    (post,) = receiver.received

    assert post.document == {
        "content": f"Job #{job.pk} @everyone failed: exit code 3 "
        f"https://mlsched.example.com/jobs/{job.pk}/",
        "allowed_mentions": {"parse": []},
    }
    assert verifies(post, hooked.notify_secret)


def test_a_platform_admin_sets_it_on_the_tenants_page(admin_client, alpha):
    page = admin_client.get(f"/admin/quotas/tenant/{alpha.pk}/change/").text

    assert 'name="notify_format"' in page
    assert "Microsoft Teams: an Adaptive Card, for a Workflows webhook" in page
