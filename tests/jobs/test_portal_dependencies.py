"""Changing a queued job's dependencies from its page, typed as the command line takes them
("afterok:12:13,afterany:14,singleton", "none" for none): the API's verb, rule and refusals."""

import pytest
from guardian.shortcuts import assign_perm

from jobs import actions, dependencies
from jobs.models import Family, Job
from jobs.states import State
from quotas.models import Membership
from tests.factories import JobFactory, MembershipFactory, UserFactory
from tests.jobs.test_dependency_update import links, written

pytestmark = pytest.mark.django_db


def job_of(alice, alpha, **kw) -> Job:
    return JobFactory(owner=alice, tenant=alpha, **kw)


def change(client, job: Job, text: str):
    return client.post(f"/jobs/{job.pk}/dependencies/", {"dependencies": text})


def form_of(page) -> str:
    """The dependencies form as drawn: its opening tag and its field."""
    text = page.content.decode()
    start = text.find('<form id="dependencies-form"')
    return "" if start < 0 else text[start : text.index("</form>", start)]


# -- changed ---------------------------------------------------------------------------------


def test_the_owner_changes_a_queued_jobs_dependencies_and_the_page_shows_them(client, alice, alpha):
    train, tune, evaluate = (job_of(alice, alpha) for _ in range(3))
    client.force_login(alice)
    assert 'value="none"' in form_of(client.get(f"/jobs/{evaluate.pk}/"))

    response = change(client, evaluate, f"afterok:{train.pk},afterany:#{tune.pk},singleton")

    assert response.status_code == 302 and response.url == f"/jobs/{evaluate.pk}/"
    assert links(evaluate) == [(train.pk, "afterok"), (tune.pk, "afterany")]
    assert Job.objects.get(pk=evaluate.pk).singleton
    page = client.get(response.url)
    assert f'<li data-job="{train.pk}">' in page.text and f'<li data-job="{tune.pk}">' in page.text
    assert f'value="afterok:{train.pk},afterany:{tune.pk},singleton"' in form_of(page)


def test_none_takes_every_dependency_away(client, alice, alpha):
    train, evaluate = job_of(alice, alpha), job_of(alice, alpha)
    actions.set_dependencies(evaluate, [dependencies.Wait(train.pk, "afterok")], True, "a")
    client.force_login(alice)

    response = change(client, evaluate, "none")

    assert response.status_code == 302
    assert links(evaluate) == []
    assert not Job.objects.get(pk=evaluate.pk).singleton


def test_a_team_mate_may_change_them_as_the_api_lets_them(client, alice, bob, alpha):
    train, evaluate = job_of(alice, alpha), job_of(alice, alpha)
    client.force_login(bob)

    assert change(client, evaluate, str(train.pk)).status_code == 302
    assert links(evaluate) == [(train.pk, "afterok")]


# -- offered only while queued ---------------------------------------------------------------


def test_a_running_job_draws_the_form_hidden_and_a_post_is_refused_with_nothing_written(
    client, alice, alpha
):
    train, evaluate = job_of(alice, alpha), job_of(alice, alpha, state=State.RUNNING)
    client.force_login(alice)
    assert " hidden>" in form_of(client.get(f"/jobs/{evaluate.pk}/"))
    before = written()

    response = change(client, evaluate, str(train.pk))

    assert response.status_code == 409
    assert f"Only a queued job&#x27;s dependencies change: job #{evaluate.pk} is running." in (
        response.text
    )
    assert written() == before


@pytest.mark.parametrize("ended", [State.SUCCEEDED, State.FAILED, State.CANCELED])
def test_an_ended_job_has_no_form(client, alice, alpha, ended):
    job = job_of(alice, alpha, state=ended)
    client.force_login(alice)

    assert form_of(client.get(f"/jobs/{job.pk}/")) == ""


def test_a_shard_has_no_form_its_batch_has(client, alice, alpha):
    spec = {"name": "embed", "family": Family.BATCH_INFERENCE, "image": "i", "command": ["x"],
            "cpu_milli": 1000, "memory_mb": 1000, "gpus": 1, "max_runtime_s": 60, "shards": 2,
            "priority_class": JobFactory().priority_class}  # fmt: skip
    first, _ = actions.submit(alice, alpha, spec)
    shard = first.batch().exclude(pk=first.pk).get()
    client.force_login(alice)

    assert form_of(client.get(f"/jobs/{first.pk}/")) != ""
    assert form_of(client.get(f"/jobs/{shard.pk}/")) == ""


# -- who may -----------------------------------------------------------------------------------


def test_a_viewer_sees_no_form_and_is_refused_with_a_403(client, alice, alpha):
    train, evaluate = job_of(alice, alpha), job_of(alice, alpha)
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)
    client.force_login(viewer)
    assert form_of(client.get(f"/jobs/{evaluate.pk}/")) == ""

    assert change(client, evaluate, str(train.pk)).status_code == 403
    assert links(evaluate) == []


def test_another_tenants_job_is_a_404(client, alice, alpha, charlie):
    train, evaluate = job_of(alice, alpha), job_of(alice, alpha)
    client.force_login(charlie)

    assert change(client, evaluate, str(train.pk)).status_code == 404
    assert links(evaluate) == []


def test_a_cancel_grant_holder_alone_is_sent_to_the_job_list_or_told_why_in_plain_text(
    client, alice, alpha, charlie
):
    evaluate = job_of(alice, alpha)
    assign_perm("jobs.cancel_job", charlie, evaluate)
    client.force_login(charlie)

    assert change(client, evaluate, "none").url == "/"
    refused = change(client, evaluate, "12x")
    assert (refused.status_code, refused["Content-Type"]) == (400, "text/plain; charset=utf-8")


# -- refused: the API's 400s, nothing written ------------------------------------------------


REFUSED = [
    # (case, text with {train} and {self} for ids, the message wanted, with the same ids)
    ("no id", "afterok:12x", "item 1: A valid integer is required."),
    ("no kind", "afterall:{train}", "item 1: &#x27;afterall&#x27; is no dependency kind"),
    ("unknown job", "999999", "No job #999999 you can see."),
    ("itself", "{self}", "Job #{self} cannot wait for itself."),
    ("a cycle", "afterany:{waiting}", "Job #{waiting} waits for job #{self}, directly or"),
    ("named twice", "{train},afterany:{train}", "Job #{train} is named twice."),
]


@pytest.mark.parametrize("case, text, message", REFUSED, ids=[case for case, *_ in REFUSED])
def test_bad_text_is_a_400_naming_the_problem_with_nothing_written(
    client, alice, alpha, case, text, message
):
    train, evaluate = job_of(alice, alpha), job_of(alice, alpha)
    waiting = job_of(alice, alpha)
    actions.set_dependencies(waiting, [dependencies.Wait(evaluate.pk, "afterok")], False,
                             "alice")  # fmt: skip
    ids = {"train": train.pk, "self": evaluate.pk, "waiting": waiting.pk}
    client.force_login(alice)
    before = written()

    response = change(client, evaluate, text.format(**ids))

    assert response.status_code == 400
    assert f'<p class="error" id="error" role="alert">{message.format(**ids)}' in response.text
    assert f'value="{text.format(**ids)}"' in form_of(response)  # kept, to correct
    assert written() == before
