"""A job's labels and the clusters page, in Chromium against daphne (fixtures in conftest.py):
a label followed from a job's page to the jobs carrying it, a second label narrowing them
further, and the nodes narrowed by state."""

import pytest
from playwright.sync_api import expect

from tests.e2e.test_job_page import log_in
from tests.factories import ClusterFactory, JobFactory, NodeFactory, PriorityClassFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_label_on_a_jobs_page_leads_to_the_jobs_carrying_it(server, browser_page, alpha, alice):
    page = browser_page
    normal = PriorityClassFactory(name="normal")
    sweep = [JobFactory(tenant=alpha, owner=alice, name=f"lr-{n}", priority_class=normal,
                        labels={"sweep": "lr", "seed": str(n)}) for n in range(2)]  # fmt: skip
    JobFactory(tenant=alpha, owner=alice, name="other", priority_class=normal)
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{sweep[0].pk}/")

    page.click("text=sweep=lr")

    fields = page.locator("input[name=label]")
    expect(fields).to_have_count(2)  # the label followed, and room for another
    expect(fields.first).to_have_value("sweep=lr")
    expect(page.locator("table.jobs tbody tr")).to_have_count(2)
    expect(page.locator("table.jobs")).not_to_contain_text("other")

    fields.last.fill("seed=1")
    page.click("form.filters button")

    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator("table.jobs tbody")).to_contain_text("lr-1")
    expect(page.locator("input[name=label]")).to_have_count(3)


def test_the_clusters_page_narrows_the_nodes_to_a_state(server, browser_page, alice):
    page = browser_page
    east = ClusterFactory(name="east")
    NodeFactory(cluster=east, name="gpu-1")
    NodeFactory(cluster=east, name="gpu-2", schedulable=False)
    log_in(page, server, "alice")
    page.goto(f"{server}/clusters/")
    expect(page.locator("#nodes tbody tr")).to_have_count(2)

    page.select_option("select[name=state]", "drained")
    page.click("form.filters button")

    expect(page.locator("#nodes tbody tr")).to_have_count(1)
    expect(page.locator("#nodes")).to_contain_text("gpu-2")
    expect(page.locator("#clusters")).to_contain_text("east")
