"""A training gang's topology domain in the portal: the submit form's "Keep its nodes in one"
field, offering the keys the nodes report and checked by the API's serializer, and the job
page and the job list saying it."""

import pytest

from jobs.models import Job
from tests.factories import JobFactory, NodeFactory
from tests.jobs.test_batch_shard_limit_portal import portal_of
from tests.jobs.test_portal_submit import FORM

pytestmark = pytest.mark.django_db

GANG_FORM = {**FORM, "family": "training", "gpus": "8", "workers": "4"}


def test_the_submit_form_offers_it_with_its_help(alice, normal_priority):
    page = portal_of(alice).get("/jobs/new/").text

    assert page.index('name="min_workers"') < page.index('name="topology"')
    assert "Keep its nodes in one (training)" in page
    assert 'aria-describedby="topology-help"' in page


def test_the_submit_form_offers_the_keys_the_nodes_report(alice, normal_priority):
    NodeFactory(topology={"rack": "r1", "zone": "z1"})
    NodeFactory(topology={"rack": "r2", "nvlink": "d7", "topology.kubernetes.io/zone": "z1"})
    NodeFactory(topology={})

    page = portal_of(alice).get("/jobs/new/").text

    keys = page.split('<datalist id="topology-keys">')[1].split("</datalist>")[0]
    assert keys == '<option value="nvlink"><option value="rack"><option value="zone">'
    assert 'name="topology" list="topology-keys"' in page


def test_the_submit_form_queues_a_gang_that_keeps_its_nodes_in_one_rack(alice, normal_priority):
    response = portal_of(alice).post("/jobs/new/", {**GANG_FORM, "topology": "rack"})

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.topology == "rack"


def test_a_bad_key_is_refused_at_its_field_and_nothing_is_written(alice, normal_priority):
    page = portal_of(alice).post("/jobs/new/", {**GANG_FORM, "topology": "Rack!"}).text

    assert "A topology label&#x27;s key" in page or "A topology label's key" in page
    assert 'aria-invalid="true"' in page.split('name="topology"')[1].split(">")[0]
    assert not Job.objects.exists()


def test_the_job_page_says_its_nodes_share_one_rack(alice):
    job = JobFactory(owner=alice, tenant__slug="alpha", family="training", workers=2,
                     topology="rack")  # fmt: skip
    plain = JobFactory(owner=alice, tenant=job.tenant, family="training", workers=2)
    portal = portal_of(alice)

    assert "all in one rack" in portal.get(f"/jobs/{job.pk}/").text
    assert 'id="topology"' not in portal.get(f"/jobs/{plain.pk}/").text


def test_the_job_list_says_a_gangs_domain_beside_its_gpus(alpha, alice):
    JobFactory(tenant=alpha, owner=alice, family="training", workers=4, gpus=8, topology="rack")
    JobFactory(tenant=alpha, owner=alice, family="training", workers=2, gpus=8)

    page = portal_of(alice).get("/").text

    assert '<td class="gpus">4 × 8 <span class="topology"' in page
    assert ">in one rack</span></td>" in page
    assert '<td class="gpus">2 × 8</td>' in page


def test_the_job_list_says_a_cpu_only_gangs_workers_in_its_domain(alpha, alice):
    JobFactory(tenant=alpha, owner=alice, family="training", workers=4, gpus=0, topology="rack")
    JobFactory(tenant=alpha, owner=alice, family="training", workers=4, min_workers=2, gpus=0,
               topology="nvlink")  # fmt: skip
    JobFactory(tenant=alpha, owner=alice, family="training", workers=4, gpus=0)

    page = portal_of(alice).get("/").text

    assert '<td class="gpus">4 workers <span class="topology"' in page
    assert ">in one rack</span></td>" in page
    assert '<td class="gpus">2–4 workers <span class="topology"' in page
    assert ">in one nvlink</span></td>" in page
    assert '<td class="gpus">none</td>' in page  # CPU only, kept in no domain
    assert "none <span" not in page
