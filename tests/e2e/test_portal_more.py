"""The job page's buttons and times after the job changes while it is open, in a real browser.
Run in its own pytest process."""

from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from clusters.models import Allocation
from jobs import actions
from jobs.models import Attempt
from jobs.states import State
from quotas.models import TenantSecret
from tests.e2e.test_job_page import in_thread, log_in
from tests.factories import AttemptFactory, ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cancel_button_goes_once_the_open_job_has_ended(server, browser_page, alpha, alice):
    page = browser_page
    job = JobFactory(tenant=alpha, owner=alice, state=State.RUNNING, max_runtime_s=4 * 86_400)
    east = ClusterFactory(name="east")
    attempt = AttemptFactory(job=job, cluster=east,
                             started_at=datetime(2024, 3, 1, 23, 0, tzinfo=UTC))  # fmt: skip
    node = NodeFactory(cluster=east, name="gpu-7", gpu_count=8)
    for gpu in (2, 3):
        Allocation.objects.create(attempt=attempt, node=node, gpu_index=gpu, slot=gpu - 2,
                                  gpu_milli=1000)  # fmt: skip
    log_in(page, server, "alice")
    page.goto(f"{server}/jobs/{job.pk}/")
    expect(page.locator("#live")).to_have_text("live", timeout=15_000)
    expect(page.locator("#cancel")).to_be_visible()

    def fail():
        # 26 hours of 4 cores asked, 2 kept busy; a peak of a quarter of 16,000 MiB.
        Attempt.objects.filter(job=job).update(
            ended_at=datetime(2024, 3, 3, 1, 0, tzinfo=UTC),
            cpu_seconds=2 * 26 * 3600,
            memory_peak_mb=4000,
            gpu_busy_seconds=0.8 * 26 * 3600,  # its one GPU
        )
        actions.transition(job, State.FAILED, "exit 1")

    in_thread(fail)

    expect(page.locator("#state")).to_have_text("failed", timeout=10_000)
    expect(page.locator("#cancel")).to_be_hidden()
    expect(page.locator("#resubmit")).to_be_visible()
    cells = page.locator("#attempts tr").first.locator("td")
    expect(cells.nth(2)).to_have_text("gpu-7 (GPUs 2, 3)")  # redrawn by job.js
    expect(cells.nth(6)).to_have_text("2024-03-01 23:00:00")  # with the day
    expect(cells.nth(7)).to_have_text("2024-03-03 01:00:00")
    expect(cells.nth(8)).to_have_text("26 h of 4 d (27 %)")
    expect(cells.nth(9)).to_have_text("2.0 of 4 cores (50 %)")
    expect(cells.nth(10)).to_have_text("3.9 of 15.6 GiB (25 %)")
    expect(cells.nth(11)).to_have_text("0.8 of 1 GPU busy (80 %)")


def test_a_commands_script_shows_its_lines_as_it_will_run_them(server, browser_page, alpha, alice):
    script = "import time\nfor i in range(3):\n    print(i)"
    job = JobFactory(tenant=alpha, owner=alice, command=["python", "-c", script])
    log_in(browser_page, server, "alice")

    browser_page.goto(f"{server}/jobs/{job.pk}/")

    # innerText as drawn: collapsed into one line, the script would read as a syntax error.
    shown = browser_page.locator("#command").inner_text()
    assert shown == "python -c '" + script + "'"


def test_a_secret_file_chosen_on_the_secrets_page_keeps_its_line_breaks(
    server, browser_page, alpha, alice
):
    kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n"
    page = browser_page
    log_in(page, server, "alice")
    page.goto(f"{server}/secrets/")
    page.fill("input[name=name]", "KUBECONFIG")
    # Typed (pasted) into the password field, the line breaks are gone before it is sent.
    page.fill("input[name=value]", kubeconfig)
    assert "\n" not in page.input_value("input[name=value]")
    page.fill("input[name=value]", "")
    page.check("input[name=as_file]")
    page.set_input_files(
        "input[name=value_file]",
        {"name": "kubeconfig", "mimeType": "text/plain", "buffer": kubeconfig.encode()},
    )

    page.click("#secret-form button[type=submit]")

    expect(page.locator("#messages")).to_contain_text("Secret KUBECONFIG of alpha created.")
    assert TenantSecret.objects.get(name="KUBECONFIG").value() == kubeconfig
