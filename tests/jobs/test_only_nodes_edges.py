"""The nodes a job runs on alone (`only_nodes`) at the edges, where `exclude_nodes` reaches: the
submit form's "Only on nodes", the job page (its details and its "It may run on" form), the
form's copy of a job, and the CLI's `submit --only-nodes`, `status` and `constrain --only-nodes
| --any-node`."""

import json

import pytest

from jobs.cli import describe
from jobs.cli.client import Api
from jobs.models import Job
from tests.factories import JobFactory, NodeFactory
from tests.jobs.test_batch_shard_limit_cli import mlsched  # noqa: F401 (a fixture)
from tests.jobs.test_exclude_nodes import SPEC, normal  # noqa: F401 (a fixture)
from tests.jobs.test_form_errors_a11y import Page
from tests.jobs.test_min_workers_edit import portal_of
from tests.jobs.test_portal import FORM
from tests.jobs.test_portal_copy import form_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def three(east):
    return [NodeFactory(cluster=east, name=f"east-{i}", gpu_count=8) for i in range(3)]


def constraints_form(page: str) -> Page:
    return Page(page.split('<form id="constraints-form"')[1].split("</form>")[0])


def test_the_submit_form_takes_them_and_the_job_page_shows_them(alice, alpha, three):
    portal = portal_of(alice)

    done = portal.post("/jobs/new/", {**FORM, "only_nodes": "east-0, east-2"})
    job = Job.objects.get(name=FORM["name"])
    page = portal.get(f"/jobs/{job.pk}/").text

    assert done.status_code == 302
    assert job.only_nodes == ["east-0", "east-2"]
    assert '<dt>Only on nodes</dt><dd id="only-nodes">east-0, east-2</dd>' in page
    assert constraints_form(page).controls["only_nodes"]["value"] == "east-0, east-2"


def test_a_job_that_may_run_on_any_node_shows_none(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice)

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert 'id="only-nodes"' not in page
    assert constraints_form(page).controls["only_nodes"]["value"] == ""


def test_the_job_pages_constraints_form_sets_and_clears_them(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice, exclude_nodes=["east-2"])
    portal = portal_of(alice)
    url = f"/jobs/{job.pk}/constraints/"

    narrowed = portal.post(url, {"exclude_nodes": "east-2", "only_nodes": "east-1, east-0"})
    set_to = Job.objects.get(pk=job.pk).only_nodes
    cleared = portal.post(url, {"exclude_nodes": "east-2", "only_nodes": ""})

    assert narrowed.status_code == cleared.status_code == 302
    assert set_to == ["east-1", "east-0"]
    assert Job.objects.get(pk=job.pk).only_nodes == []
    assert Job.objects.get(pk=job.pk).exclude_nodes == ["east-2"]


def test_a_copy_of_a_job_fills_them_in(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice, only_nodes=["east-1", "east-0"])
    plain = JobFactory(tenant=alpha, owner=alice)
    portal = portal_of(alice)

    values = form_of(portal.get(f"/jobs/new/?copy={job.pk}").text)
    empty = form_of(portal.get(f"/jobs/new/?copy={plain.pk}").text)

    assert values["only_nodes"] == "east-1, east-0"
    assert empty["only_nodes"] == ""


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ({"only_nodes": "east-9"}, "No cluster has a node named 'east-9'."),
        ({"only_nodes": "east-0, east-0"}, "Node 'east-0' is named twice."),
        ({"only_nodes": "east-1", "exclude_nodes": "east-1"}, "'east-1' is in exclude_nodes too"),
    ],
    ids=["unknown", "twice", "also excluded"],
)
def test_a_submit_form_error_names_the_only_nodes_field(alice, alpha, three, typed, said):
    response = portal_of(alice).post("/jobs/new/", {**FORM, **typed})

    page = Page(response.text)
    assert response.status_code == 400
    assert said in response.context["errors"]["only_nodes"]
    assert page.controls["only_nodes"]["aria-invalid"] == "true"
    assert page.controls["only_nodes"]["aria-describedby"] == "only-nodes-help id_only_nodes_error"
    assert said in page.description("only_nodes")
    assert page.controls["only_nodes"]["value"] == typed["only_nodes"]  # kept as typed
    assert not Job.objects.exists()


def test_a_constraints_form_error_names_the_only_nodes_field(alice, alpha, three):
    job = JobFactory(tenant=alpha, owner=alice)

    refused = portal_of(alice).post(f"/jobs/{job.pk}/constraints/", {"only_nodes": "east-7"})

    form = constraints_form(refused.text)
    assert refused.status_code == 400 and "east-7" in refused.text
    assert form.controls["only_nodes"]["aria-invalid"] == "true"
    assert form.controls["only_nodes"]["aria-describedby"] == "constraints-help error"
    assert "aria-invalid" not in form.controls["exclude_nodes"]
    assert Job.objects.get(pk=job.pk).only_nodes == []


def test_the_cli_submits_them_and_status_prints_them(mlsched, alice, alpha, three, tmp_path):  # noqa: F811
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(SPEC))

    status, out, err = mlsched("submit", str(spec), "--only-nodes", "east-0,east-2")
    job = Job.objects.get(pk=int(out.split()[0]))
    described = mlsched("status", str(job.pk))[1]

    assert status == 0, err
    assert job.only_nodes == ["east-0", "east-2"]
    # As `status` describes it on a terminal.
    lines = describe.described(json.loads(described), [], False)
    assert describe.field("Only on nodes", "east-0, east-2") in lines


def test_status_prints_no_line_for_a_job_that_may_run_on_any_node(mlsched, alice, alpha):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice)

    answer = json.loads(mlsched("status", str(job.pk))[1])
    older = {k: v for k, v in answer.items() if k != "only_nodes"}  # an older server's answer

    for described in (answer, older):
        lines = describe.described(described, [], False)
        assert not [line for line in lines if line.startswith("Only on nodes:")]


def test_the_cli_constrains_them_and_any_node_clears_them(mlsched, alice, alpha, three):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice)

    constrained = mlsched("constrain", str(job.pk), "--only-nodes", "east-1")
    set_to = Job.objects.get(pk=job.pk).only_nodes
    cleared = mlsched("constrain", str(job.pk), "--any-node")

    assert constrained == (
        0,
        "may run on any GPU type of any cluster, only on node east-1 (1 job)\n",
        "",
    )
    assert set_to == ["east-1"]
    assert cleared == (0, "may run on any GPU type of any cluster (1 job)\n", "")
    assert Job.objects.get(pk=job.pk).only_nodes == []


def test_the_cli_constrain_leaves_them_when_not_named(mlsched, alice, alpha, three):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, only_nodes=["east-2"])

    status, out, err = mlsched("constrain", str(job.pk), "--exclude", "east-0")

    assert status == 0, err
    assert out.endswith(", not on node east-0, only on node east-2 (1 job)\n")
    assert Job.objects.get(pk=job.pk).only_nodes == ["east-2"]


def test_constrain_prints_an_older_servers_answer_that_has_no_only_nodes(
    mlsched,  # noqa: F811
    alice,
    alpha,
    three,
    monkeypatch,
):
    job = JobFactory(tenant=alpha, owner=alice)
    real = Api.call

    def older(api, method: str, path: str, **kwargs) -> dict:
        answer = real(api, method, path, **kwargs)
        answer.pop("only_nodes", None)
        return answer

    monkeypatch.setattr(Api, "call", older)

    answer = mlsched("constrain", str(job.pk), "--exclude", "east-0")

    assert answer == (0, "may run on any GPU type of any cluster, not on node east-0 (1 job)\n", "")


def test_only_nodes_and_any_node_together_are_refused_by_argparse(mlsched, alice, alpha, three):  # noqa: F811
    job = JobFactory(tenant=alpha, owner=alice, only_nodes=["east-2"])

    status, out, err = mlsched("constrain", str(job.pk), "--only-nodes", "east-0", "--any-node")

    assert status == 2 and out == ""
    assert "argument --any-node: not allowed with argument --only-nodes" in err
    assert Job.objects.get(pk=job.pk).only_nodes == ["east-2"]
