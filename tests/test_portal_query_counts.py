"""What the portal's pages cost as the platform grows: every page, to a team's owner and to a
platform admin, asks the database as many queries on a platform of one of each kind of row as
on one of several of each (the platform tests/test_api_query_counts.py grows for the API's
calls). A count that grows with the rows is a query per row (an N+1)."""

from urllib.parse import urlsplit

from django.test import Client
from django.urls import get_resolver, resolve

from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_api_query_counts import JOB_KINDS, grown, sweep  # noqa: F401
from tests.test_openapi import root, routes, world  # noqa: F401

# Each page once, with the parameters that read the most for each row: the job list as it
# is and a batch's shards, the submit form copying a job that waits for others, the usage page
# split by a label, the users and the classes, and a job's page for each kind of job.
PAGES = ["/", "/?batch={batch}", "/queue/", "/jobs/new/?copy={waiting}", "/overview/",
         "/clusters/", "/usage/?by_label=project&by_user=1&by_class=1", "/usage.csv",
         "/usage-daily.csv", "/usage-by-label.csv?by_label=project", "/usage-by-user.csv",
         "/usage-by-class.csv", "/jobs.csv", "/jobs/matching/cancel/?label=sweep", "/quotas/",
         "/secrets/", "/teams/", "/tokens/", "/cli-login/", "/accounts/email/",
         "/accounts/password/", "/accounts/password/done/", "/accounts/sign-ins/", "/metrics",
         "/cli/mlsched.pyz", *("/jobs/{" + kind + "}/" for kind in JOB_KINDS)]  # fmt: skip
# The routes outside the APIs that are no page to sweep: what the pages' forms post to, the
# signed-out's sign-in, sign-out and password reset, the link an email carries, the load
# balancer's probe.
NOT_PAGES = {
    "jobs/selected/", "teams/<slug:slug>/members/", "secrets/<slug:slug>/<str:name>/delete/",
    "tokens/<int:pk>/revoke/", "accounts/login/", "accounts/logout/", "accounts/oidc/login/",
    "accounts/oidc/callback/", "accounts/oidc/backchannel-logout/", "accounts/password_reset/",
    "accounts/password_reset/done/", "accounts/reset/<uidb64>/<token>/", "accounts/reset/done/",
    "accounts/email/<str:token>/", "healthz",
    *(f"jobs/<int:pk>/{verb}/" for verb in (
        "cancel", "hold", "release", "requeue", "resubmit", "dependencies", "priority",
        "shard-limit", "min-workers", "runtime-limit", "request", "constraints", "labels",
        "notifications", "retries")),
}  # fmt: skip


def test_the_sweep_asks_every_page_of_the_portal():
    named = dict.fromkeys(JOB_KINDS, 1)
    swept = {resolve(urlsplit(page.format(**named)).path).route for page in PAGES}
    portal = {route for route, _ in routes(get_resolver().url_patterns)
              if not route.startswith(("admin/", "api/", "scim/"))}  # fmt: skip

    assert sorted(portal - swept - NOT_PAGES) == []
    assert swept <= portal


def test_no_page_of_the_portal_asks_more_queries_as_the_platform_grows(grown, alice, root):  # noqa: F811
    browsers = {}
    for user in (alice, root):
        browsers[user.username] = Client()
        browsers[user.username].force_login(user)

    grew = sweep(grown, browsers, PAGES)

    assert not grew, "\n".join(grew)
