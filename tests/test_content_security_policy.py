"""The portal's and the admin's pages say what they may load and talk to
(Content-Security-Policy); the API's answers, JSON, do not carry it. tests/e2e/test_security.py
and tests/e2e/test_admin_policy.py show Chromium keeping to it."""

import pytest

from mlsched_site.middleware import CONTENT_SECURITY_POLICY

pytestmark = pytest.mark.django_db


def test_it_is_the_policy_of_the_portals_and_the_admins_pages_not_the_apis(admin_client):
    answers = {path: admin_client.get(path) for path in
               ["/", "/jobs/new/", "/accounts/login/", "/admin/", "/admin/quotas/tenant/",
                "/api/v1/me/"]}  # fmt: skip

    said = {path: a.headers.get("Content-Security-Policy") for path, a in answers.items()}

    assert said == {
        "/": CONTENT_SECURITY_POLICY, "/jobs/new/": CONTENT_SECURITY_POLICY,
        "/accounts/login/": CONTENT_SECURITY_POLICY, "/admin/": CONTENT_SECURITY_POLICY,
        "/admin/quotas/tenant/": CONTENT_SECURITY_POLICY, "/api/v1/me/": None,
    }  # fmt: skip
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
