"""The submit form filled in from a job (`/jobs/new/?copy=<id>`, the job page's "Submit a copy"):
its spec as a person would have typed it, which the form, sent as it is, submits again as an
equal job."""

from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.utils import timezone
from guardian.shortcuts import assign_perm

from jobs.models import Job
from tests.factories import JobFactory, PriorityClassFactory, TenantVolumeFactory


class FormFields(HTMLParser):
    """What a browser would send of the page's submit form: its inputs', selects' and
    textareas' values (a checkbox only when checked)."""

    def __init__(self):
        super().__init__()
        self.values: dict[str, str] = {}
        self._select = self._textarea = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        name = attrs.get("name")
        if tag == "input" and name and (attrs.get("type") != "checkbox" or "checked" in attrs):
            self.values[name] = attrs.get("value") or ""
        elif tag == "select":
            self._select = name
        elif tag == "option" and self._select and "selected" in attrs:
            self.values[self._select] = attrs.get("value") or ""
        elif tag == "textarea":
            self._textarea = name
            self.values[name] = ""

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self.values[self._textarea] = self.values[self._textarea].removeprefix("\n")
            self._textarea = None

    def handle_data(self, data):
        if self._textarea:
            self.values[self._textarea] += data


def form_of(page: str) -> dict[str, str]:
    parser = FormFields()
    parser.feed(page[page.index('id="submit-form"') :])
    return parser.values


@pytest.fixture
def browser(client, alice, normal_priority):
    client.force_login(alice)
    return client


def test_a_copy_sent_as_it_is_queues_a_job_equal_to_the_first(browser, alpha, alice, east):
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    before = JobFactory(tenant=alpha, owner=alice)
    first = JobFactory(
        tenant=alpha, owner=alice, name="llm", workers=4, min_workers=2, gpus=8,
        command=["python", "-c", "import os\nprint(os.environ['RANK'])"],
        env={"LR": "3e-4", "ARGS": " --x=1 "}, labels={"project": "llm"},
        cluster_selector={"region": "eu"}, gpu_types=["H100", "A100"], topology="rack",
        volumes=[{"name": "imagenet", "path": "/data", "read_only": True}],
        begin=timezone.now() + timedelta(days=2), max_retries=5, retry_user_errors=True,
        preemptible=False, priority=7,
    )  # fmt: skip
    first.dependency_links.create(on=before, kind="afterany")

    page = browser.get(f"/jobs/new/?copy={first.pk}")
    sent = browser.post("/jobs/new/", form_of(page.text))

    assert sent.status_code == 302, sent.content.decode()[:2000]
    copy = Job.objects.exclude(pk__in=[first.pk, before.pk]).get()
    same = ["name", "family", "image", "command", "env", "labels", "cluster_selector",
            "gpu_types", "topology", "volumes", "workers", "min_workers", "gpus", "cpu_milli",
            "memory_mb", "max_retries", "retry_user_errors", "preemptible", "priority",
            "max_runtime_s", "singleton"]  # fmt: skip
    assert {f: getattr(copy, f) for f in same} == {f: getattr(first, f) for f in same}
    assert abs(copy.begin - first.begin) < timedelta(minutes=1)  # the form's is to the minute
    assert list(copy.dependency_links.values_list("on_id", "kind")) == [(before.pk, "afterany")]
    assert f'A copy of job <a href="/jobs/{first.pk}/">#{first.pk} llm</a>' in page.text


def test_a_copy_leaves_out_a_begin_and_a_deadline_already_past(browser, alpha, alice):
    past = timezone.now() - timedelta(hours=1)
    job = JobFactory(tenant=alpha, owner=alice, begin=past, deadline=past + timedelta(minutes=5))

    values = form_of(browser.get(f"/jobs/new/?copy={job.pk}").text)

    assert values["begin"] == values["deadline"] == ""


def test_an_outsiders_copy_leaves_out_the_jobs_of_the_team_they_cannot_see(
    client, alpha, alice, charlie, normal_priority
):
    before = JobFactory(tenant=alpha, owner=alice)
    job = JobFactory(tenant=alpha, owner=alice)
    job.dependency_links.create(on=before, kind="afterok")
    assign_perm("view_job", charlie, job)
    client.force_login(charlie)

    values = form_of(client.get(f"/jobs/new/?copy={job.pk}").text)

    assert values["depends_on"] == ""


def test_a_copy_says_which_variables_hold_values_of_several_lines_the_form_cannot(
    browser, alpha, alice
):
    job = JobFactory(tenant=alpha, owner=alice, env={"KEY": "-----BEGIN\nabc\n-----END", "A": "1"})

    page = browser.get(f"/jobs/new/?copy={job.pk}").text

    assert '<p class="error" id="untypable">Its environment gives KEY a value of several' in page


def test_a_copy_of_another_teams_job_asks_for_a_team_rather_than_take_the_first(
    client, alpha, alice, charlie, normal_priority
):
    theirs = JobFactory(tenant=alpha, owner=alice)
    assign_perm("view_job", charlie, theirs)
    client.force_login(charlie)

    page = client.get(f"/jobs/new/?copy={theirs.pk}").text
    sent = client.post("/jobs/new/", form_of(page))

    assert '<option value="" selected>choose a team</option>' in page
    assert form_of(page)["tenant"] == ""
    assert sent.status_code == 400 and Job.objects.count() == 1


def test_a_copy_at_a_class_one_may_not_use_asks_for_a_class(
    client, alpha, alice, charlie, normal_priority
):
    urgent = PriorityClassFactory(name="urgent", value=10)
    urgent.tenants.add(alpha)  # open to alpha alone
    theirs = JobFactory(tenant=alpha, owner=alice, priority_class=urgent)
    assign_perm("view_job", charlie, theirs)
    client.force_login(charlie)
    client_of_alice = type(client)()
    client_of_alice.force_login(alice)

    page = client.get(f"/jobs/new/?copy={theirs.pk}").text
    alices = form_of(client_of_alice.get(f"/jobs/new/?copy={theirs.pk}").text)

    assert '<option value="" selected>its team&#x27;s default (normal)</option>' in page
    assert form_of(page)["priority_class"] == ""
    assert alices["priority_class"] == "urgent"


@pytest.mark.parametrize("copy", ["999999", "abc", ""])
def test_a_copy_of_a_job_one_cannot_see_or_of_no_job_is_a_404(browser, alpha, copy):
    theirs = JobFactory()  # another team's
    asked = str(theirs.pk) if copy == "999999" else copy

    assert browser.get(f"/jobs/new/?copy={asked}").status_code == 404


def test_the_job_page_offers_to_submit_a_copy(browser, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)

    page = browser.get(f"/jobs/{job.pk}/").text

    assert f'<a id="copy" href="/jobs/new/?copy={job.pk}"' in page
