"""The admin's pages in Chromium under their Content-Security-Policy: Django's admin scripts
and widgets (the calendar, the related-object popups, the permission pages) run, and markup
that got into a page past its escaping does not."""

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django_celery_beat.models import CrontabSchedule
from playwright.sync_api import expect

from tests.factories import ClusterFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db(transaction=True)


def admin_pages(job, cluster, node, tenant, root) -> list[str]:
    """Every registered model's list and add page, and a change page of each kind shown."""
    pages = ["/admin/"]
    for model, model_admin in admin.site._registry.items():
        where = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        pages.append(where)
        if model_admin.has_add_permission(type("Request", (), {"user": root})()):
            pages.append(f"{where}add/")
    pages += [f"/admin/jobs/job/{job.pk}/change/", f"/admin/jobs/job/{job.pk}/permissions/",
              f"/admin/clusters/cluster/{cluster.pk}/change/",
              f"/admin/clusters/node/{node.pk}/change/",
              f"/admin/quotas/tenant/{tenant.pk}/change/",
              f"/admin/auth/user/{root.pk}/password/",
              "/admin/quotas/tenant/add/?_to_field=id&_popup=1"]  # fmt: skip
    return pages


def test_the_admins_pages_run_within_their_content_security_policy_and_block_markup_scripts(
    server, browser_page, policy_refused, alpha
):
    page, refused = browser_page, policy_refused
    root = User.objects.create_superuser("root", "root@example.com", "password")
    cluster = ClusterFactory(name="east")
    node = NodeFactory(cluster=cluster)
    job = JobFactory(tenant=alpha, owner=root, name="train")
    crontab = CrontabSchedule.objects.create(minute="30", hour="3")
    page.goto(f"{server}/admin/login/")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", "password")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server}/admin/")

    for path in admin_pages(job, cluster, node, alpha, root):
        answer = page.goto(f"{server}{path}")
        assert answer.status == 200, path
    # The scripts of the admin's pages at work: a date field's calendar, a beat schedule's
    # crontab said in words, a new agent token selected to copy.
    page.goto(f"{server}/admin/clusters/maintenancewindow/add/")
    page.click("#calendarlink0")
    expect(page.locator("#calendarbox0")).to_be_visible()
    page.click("#calendarbox0 .calendar-shortcuts a >> nth=1")  # Today
    expect(page.locator("#id_starts_at_0")).not_to_have_value("")
    page.goto(f"{server}/admin/django_celery_beat/periodictask/add/")
    page.select_option("#id_crontab", str(crontab.pk))
    expect(page.locator(".field-crontab .help")).to_contain_text("Translation: At 03:30")
    page.goto(f"{server}/admin/clusters/cluster/")
    page.check(f"input[name=_selected_action][value='{cluster.pk}']")
    page.select_option("select[name=action]", "rotate_agent_token")
    with page.expect_navigation():  # the page's deferred script has run when it has loaded
        page.click("button[name=index]")
    page.focus("input.agent-token")
    token = page.input_value("input.agent-token")
    assert page.evaluate("getSelection().toString() || document.activeElement.selectionEnd") in (
        token, len(token)
    )  # fmt: skip
    assert refused == []
    page.evaluate("""document.body.insertAdjacentHTML(
        "beforeend", '<img src="/nowhere.png" onerror="window.pwned=1">')""")
    page.wait_for_timeout(500)
    assert page.evaluate("window.pwned") is None
    assert any("inline event handler" in text for _, text in refused)
