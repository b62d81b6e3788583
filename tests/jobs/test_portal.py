import html
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Job
from jobs.states import State
from quotas.models import Membership
from tests.factories import JobFactory, MembershipFactory, PriorityClassFactory, UserFactory


def test_it_shows_a_landing_page_to_visitors(client, db):
    page = client.get("/")

    assert page.status_code == 200
    assert "Log in" in page.text


def test_it_lists_the_jobs_of_the_users_tenants(client, alpha, alice, bob):
    JobFactory(tenant=alpha, owner=alice, name="alice-train")
    client.force_login(bob)

    page = client.get("/")

    assert "alice-train" in page.text


def test_it_hides_other_tenants_jobs(client, alpha, alice, charlie):
    JobFactory(tenant=alpha, owner=alice, name="alice-train")
    client.force_login(charlie)

    page = client.get("/")

    assert "alice-train" not in page.text
    assert "No jobs yet." in page.text


def test_a_team_mate_sees_a_jobs_page(client, alpha, alice, bob):
    job = JobFactory(tenant=alpha, owner=alice, name="alice-train")
    client.force_login(bob)

    page = client.get(f"/jobs/{job.pk}/")

    assert page.status_code == 200
    assert "alice-train" in page.text


def test_another_tenants_job_page_is_a_404(client, alpha, alice, charlie):
    job = JobFactory(tenant=alpha, owner=alice)
    client.force_login(charlie)

    assert client.get(f"/jobs/{job.pk}/").status_code == 404


def test_a_visitor_is_sent_to_log_in_for_a_job_page(client, alpha, alice):
    job = JobFactory(tenant=alpha, owner=alice)

    page = client.get(f"/jobs/{job.pk}/")

    assert page.status_code == 302
    assert page.url.startswith("/accounts/login/")


FORM = {"tenant": "alpha", "name": "resnet", "family": "training", "image": "pytorch:2",
        "command": "python train.py --epochs 3", "cpu_milli": "4000", "memory_mb": "16000",
        "gpus": "2", "gpu_milli": "0", "workers": "2", "shards": "1",
        "priority_class": "normal", "max_runtime_s": "3600"}  # fmt: skip


def test_the_submit_form_queues_a_job_and_shows_it(client, alice):
    PriorityClassFactory(name="normal", value=0)
    client.force_login(alice)

    response = client.post("/jobs/new/", FORM)

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert (job.command, job.workers, job.state) == (["python", "train.py", "--epochs", "3"], 2,
                                                     State.QUEUED)  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"cpu_milli": "0"}, "cpu_milli"), ({"command": 'python -c "print(1)'}, "command")],
)
def test_the_submit_form_marks_the_bad_field_and_writes_nothing(client, alice, changes, field):
    PriorityClassFactory(name="normal", value=0)
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, **changes})

    assert response.status_code == 400
    assert f'data-field="{field}"' in response.text
    assert not Job.objects.exists()


def test_the_submit_form_says_its_command_is_run_without_a_shell(client, alice):
    client.force_login(alice)

    page = client.get("/jobs/new/").content.decode()

    assert 'placeholder="python train.py --epochs 3" aria-describedby="command-help"' in page
    help_text = page[page.index('<small id="command-help">') :]
    assert "run without a shell" in help_text[:400] and "bash -c" in help_text[:400]


def test_a_team_mate_cancels_from_the_job_page(client, alpha, alice, bob):
    job = JobFactory(tenant=alpha, owner=alice)
    client.force_login(bob)

    assert 'id="cancel"' in client.get(f"/jobs/{job.pk}/").text
    response = client.post(f"/jobs/{job.pk}/cancel/")

    job.refresh_from_db()
    assert response.status_code == 302
    assert job.state == State.CANCELED


def test_a_viewer_sees_no_cancel_button_and_cannot_cancel(client, alpha, alice):
    viewer = UserFactory(username="vera")
    MembershipFactory(tenant=alpha, user=viewer, role=Membership.Role.VIEWER)
    job = JobFactory(tenant=alpha, owner=alice)
    client.force_login(viewer)

    assert 'id="cancel"' not in client.get(f"/jobs/{job.pk}/").text
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.state == State.QUEUED


def test_an_outsider_cannot_cancel_another_tenants_job(client, alpha, alice, charlie):
    job = JobFactory(tenant=alpha, owner=alice)
    client.force_login(charlie)

    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404


def test_the_job_list_narrows_by_state_team_and_name(client, alpha, gamma, alice, charlie):
    MembershipFactory(tenant=gamma, user=alice)
    JobFactory(tenant=alpha, owner=alice, name="resnet-train", state=State.RUNNING)
    JobFactory(tenant=alpha, owner=alice, name="resnet-eval", state=State.QUEUED)
    JobFactory(tenant=gamma, owner=charlie, name="bert-train", state=State.RUNNING)
    client.force_login(alice)

    def names(query):
        page = client.get("/" + query)
        assert page.status_code == 200
        return sorted(job.name for job in page.context["jobs"])

    assert names("?state=running") == ["bert-train", "resnet-train"]
    assert names("?tenant=alpha") == ["resnet-eval", "resnet-train"]
    assert names("?q=TRAIN&tenant=gamma") == ["bert-train"]
    assert names("?q=gpt") == []


def test_the_job_list_pages_back_through_older_jobs(client, alpha, alice):
    jobs = [JobFactory(tenant=alpha, owner=alice, name=f"job-{i:03}") for i in range(60)]
    client.force_login(alice)

    first = client.get("/?q=job-")
    older = client.get(first.context["next"] and f"/?q=job-&before={first.context['next']}")

    assert len(first.context["jobs"]) == 50 and first.context["jobs"][0] == jobs[-1]
    assert f"q=job-&amp;before={jobs[10].pk}" in first.text
    assert [j.pk for j in older.context["jobs"]] == [j.pk for j in reversed(jobs[:10])]
    assert older.context["next"] is None


@pytest.mark.parametrize("query, field", [("?state=sleeping", "state"), ("?before=x", "before"),
                                          ("?q=" + "a" * 201, "q")])  # fmt: skip
def test_a_bad_job_list_filter_is_a_400_naming_it(client, alpha, alice, query, field):
    JobFactory(tenant=alpha, owner=alice)
    client.force_login(alice)

    page = client.get("/" + query)

    assert page.status_code == 400
    assert f'data-field="{field}"' in page.text
    assert list(page.context["jobs"]) == []


def test_the_job_page_shows_the_command_with_its_quoting(client, alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, command=["bash", "-c", "echo hi; sleep 20"])
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/").text

    shown = html.unescape(re.search(r'<code id="command">([^<]*)</code>', page).group(1))
    assert shown == "bash -c 'echo hi; sleep 20'"


def test_the_job_page_names_a_family_as_the_submit_form_does(client, alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, family="batch_inference")
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/").text

    assert "<dt>Family</dt><dd>Batch inference</dd>" in page


def test_the_job_list_shows_who_submitted_each_job_and_the_gpus_it_asks(client, alpha, alice, bob):
    JobFactory(tenant=alpha, owner=alice, name="gang", workers=4, gpus=8)
    JobFactory(tenant=alpha, owner=bob, name="probe", gpus=0, gpu_milli=250)
    JobFactory(tenant=alpha, owner=bob, name="tokenize", gpus=0)
    client.force_login(alice)

    rows = {
        re.search(r">([a-z]+)</a>", row).group(1): re.findall(r"<td[^>]*>([^<]*)</td>", row)
        for row in client.get("/").text.split("<tr class=")[1:]
    }

    # Cells after the id: tenant, by, family, GPUs.
    assert rows["gang"][1:5] == ["Alpha", "alice", "Training", "4 × 8"]
    assert rows["probe"][2:5] == ["bob", "Training", "250m"]
    assert rows["tokenize"][4] == "none"


def test_the_job_list_reads_the_submitters_in_its_one_query(client, alpha, alice, bob):
    for owner in (alice, bob):
        JobFactory(tenant=alpha, owner=owner)
    client.force_login(alice)
    client.get("/")  # the session's first reads
    with CaptureQueriesContext(connection) as two:
        client.get("/")
    for owner in [UserFactory() for _ in range(6)]:
        MembershipFactory(tenant=alpha, user=owner)
        JobFactory(tenant=alpha, owner=owner)

    with CaptureQueriesContext(connection) as eight:
        client.get("/")

    assert len(eight.captured_queries) == len(two.captured_queries)
