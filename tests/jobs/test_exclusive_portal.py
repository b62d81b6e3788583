"""A job whose workers each take a node to itself (`exclusive`) in the portal: the submit form's
"Take its nodes whole" box, checked by the API's serializer and filled in by a copy, and the
job page and the job list saying it."""

import pytest

from jobs.models import Job
from tests.factories import JobFactory, NodeFactory
from tests.jobs.test_batch_shard_limit_portal import portal_of
from tests.jobs.test_portal import FORM
from tests.jobs.test_portal_copy import form_of

pytestmark = pytest.mark.django_db

# Two workers of 2 GPUs each, in the form's fields.
TWOS = {**FORM, "exclusive": "true"}
SHARE = {**FORM, "family": "evaluation", "workers": "1", "gpus": "0", "gpu_milli": "500",
         "exclusive": "true"}  # fmt: skip


@pytest.fixture
def twos(east):
    """Two nodes of 2 GPUs: what an exclusive worker of 2 GPUs takes whole."""
    return NodeFactory.create_batch(2, cluster=east, gpu_count=2)


def test_the_submit_form_offers_the_box_with_its_help(alice, normal_priority):
    page = portal_of(alice).get("/jobs/new/").text

    assert page.index('name="features"') < page.index('name="exclusive"')
    assert page.index('name="exclusive"') < page.index('name="priority_class"')
    assert "Take its nodes whole" in page
    assert 'type="checkbox" name="exclusive" value="true"' in page
    assert 'aria-describedby="exclusive-help"' in page
    assert "Slurm's --exclusive" in page.split('id="exclusive-help">')[1].split("</small>")[0]


def test_the_box_checked_queues_an_exclusive_job(alice, normal_priority, twos):
    portal = portal_of(alice)

    response = portal.post("/jobs/new/", TWOS)
    plain = portal.post("/jobs/new/", {**FORM, "name": "plain"})

    job = Job.objects.get(name=FORM["name"])
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.exclusive is True
    assert plain.status_code == 302
    assert Job.objects.get(name="plain").exclusive is False


def test_a_share_is_refused_at_the_box_and_nothing_is_written(alice, normal_priority, twos):
    page = portal_of(alice).post("/jobs/new/", SHARE).text

    assert "An exclusive job takes whole nodes: ask whole GPUs, or none." in page
    box = page.split('name="exclusive"')[1].split(">")[0]
    assert 'aria-invalid="true"' in box and "checked" in box
    assert not Job.objects.exists()


def test_no_node_with_exactly_its_gpus_is_refused_at_the_box(alice, normal_priority, twos):
    page = portal_of(alice).post("/jobs/new/", {**TWOS, "gpus": "4"}).text

    assert "No node has exactly 4 GPUs" in page
    assert 'aria-invalid="true"' in page.split('name="exclusive"')[1].split(">")[0]
    assert not Job.objects.exists()


def test_a_copy_of_an_exclusive_job_has_the_box_checked(alice, alpha, normal_priority, twos):
    job = JobFactory(tenant=alpha, owner=alice, gpus=2, workers=2, exclusive=True)
    plain = JobFactory(tenant=alpha, owner=alice, gpus=2, workers=2)
    portal = portal_of(alice)

    values = form_of(portal.get(f"/jobs/new/?copy={job.pk}").text)
    unchecked = form_of(portal.get(f"/jobs/new/?copy={plain.pk}").text)

    assert values["exclusive"] == "true"
    assert "exclusive" not in unchecked


def test_the_job_page_says_its_nodes_are_its_own(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, workers=2, exclusive=True)
    plain = JobFactory(tenant=alpha, owner=alice, gpus=8, workers=2)
    portal = portal_of(alice)

    page = portal.get(f"/jobs/{job.pk}/").text
    other = portal.get(f"/jobs/{plain.pk}/").text

    assert '<dt>Nodes</dt><dd id="exclusive">to itself, one per worker (exclusive)' in page
    assert 'id="exclusive"' not in other and "<dt>Nodes</dt>" not in other


def test_the_job_page_says_a_domain_and_exclusive_under_one_heading(alice, alpha):
    job = JobFactory(tenant=alpha, owner=alice, gpus=8, workers=4, exclusive=True,
                     topology="rack")  # fmt: skip

    page = portal_of(alice).get(f"/jobs/{job.pk}/").text

    assert page.count("<dt>Nodes</dt>") == 1
    nodes = page.split("<dt>Nodes</dt>")[1].split("<dt>")[0]
    assert '<dd id="topology">all in one rack' in nodes
    assert '<dd id="exclusive">to itself, one per worker (exclusive)' in nodes


def test_the_job_list_says_it_beside_the_gpus(alpha, alice):
    JobFactory(tenant=alpha, owner=alice, workers=2, gpus=8, exclusive=True)
    JobFactory(tenant=alpha, owner=alice, workers=1, gpus=8, exclusive=True)
    JobFactory(tenant=alpha, owner=alice, workers=3, gpus=0, exclusive=True)
    JobFactory(tenant=alpha, owner=alice, workers=4, gpus=8, exclusive=True, topology="rack")
    JobFactory(tenant=alpha, owner=alice, workers=5, gpus=8)

    page = portal_of(alice).get("/").text

    assert '<td class="gpus">2 × 8<span class="exclusive"' in page
    assert ">, nodes to itself</span></td>" in page
    assert '<td class="gpus">8<span class="exclusive"' in page
    assert ">, node to itself</span></td>" in page
    assert '<td class="gpus">3 workers<span class="exclusive"' in page
    assert '>in one rack</span><span class="exclusive"' in page
    assert '<td class="gpus">5 × 8</td>' in page
