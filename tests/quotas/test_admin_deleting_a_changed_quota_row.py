"""Of two platform admins on one tenant's page, the one who deletes a quota row the other
changed since the page was drawn is told it changed, and the row stays as changed."""

import pytest

from tests.quotas import test_admin_concurrent_quota_edits as concurrent
from tests.quotas.test_admin_concurrent_quota_edits import drawn_on, tenant_form

pytestmark = pytest.mark.django_db

# Two superusers' clients, alpha's A100 quota row and alpha's page, as in concurrent edits.
admins, quota, tenant_page = concurrent.admins, concurrent.quota, concurrent.tenant_page


def test_deleting_a_quota_row_changed_since_the_page_was_drawn_is_refused(
    admins, alpha, quota, tenant_page
):
    root, ruth = admins
    drawn = drawn_on(ruth, tenant_page)
    changed = tenant_form(alpha, quota, drawn_on(root, tenant_page), guaranteed=16, borrow_limit=0)
    assert root.post(tenant_page, changed).status_code == 302

    deleting = tenant_form(alpha, quota, drawn, guaranteed=8, borrow_limit=0)
    answer = ruth.post(tenant_page, {**deleting, "quotas-0-DELETE": "on"})

    assert answer.status_code == 200
    assert "This quota was changed by someone else since the page was drawn" in answer.text
    assert alpha.quotas.get().guaranteed == 16
