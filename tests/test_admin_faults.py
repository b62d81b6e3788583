"""An admin page that loses the database partway leaves nothing half-written and answers 503
with a page saying to try again: as a platform admin, each registered model's change page sent
back as drawn, and each of its list's actions run on its first row, are sent with their
connection ended before their first write, then their second, and so on, until they run whole
(tests/test_api_faults.py's `cut_until_whole`). Deletions go last."""

import pytest
import yaml
from django.contrib import admin
from django.contrib.auth import get_user_model

from tests.test_admin_bad_input import Sender, admins_world, form_pages, listing, the_form  # noqa: F401
from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_api_faults import cut_until_whole
from tests.test_openapi import root, world  # noqa: F401
from tests.test_portal_bad_input import html_of

pytestmark = pytest.mark.django_db(transaction=True)


def first_row(model, request):
    """The model's first row, the admin asking left out of the users (signed out, the sweep
    would end)."""
    rows = model._default_manager.order_by("pk")
    if model is get_user_model():
        rows = rows.exclude(pk=request.user.pk)
    return rows.first()


def actions_run(request) -> list[tuple[str, dict]]:
    """Each list's actions on its first row, as the list's form posts them (a deletion's
    confirmed), deletions last."""
    found = []
    for model, model_admin in admin.site._registry.items():
        row = first_row(model, request)
        for action in model_admin.get_actions(request) if row is not None else ():
            fields = {"action": action, "index": "0", "_selected_action": str(row.pk)}
            found.append((listing(model), fields | ({"post": "yes"} if "delete" in action else {})))
    return sorted(found, key=lambda form: "delete" in form[1]["action"])


def test_an_admin_page_that_loses_the_database_at_any_write_writes_nothing_and_answers_503(
    admins_world, root  # noqa: F811
):  # fmt: skip
    browser = Sender(root).browser
    saves = []
    for page, _ in form_pages(admins_world):
        if page.endswith("/change/"):
            values, _ = the_form(html_of(browser.get(page)))
            if "_save" in values:  # a page to look at only has no save
                saves.append((page, values))
    actions = actions_run(admins_world)
    found, cuts = {}, 0
    for page, fields in [*saves, *actions]:
        form = (page, fields)
        wrong, made, _ = cut_until_whole(lambda form: browser.post(*form), lambda f=form: f)
        name = fields.get("action", "save")
        found |= {f"{page} {name} at write {at}": said for at, said in wrong.items()}
        cuts += made

    assert not found, yaml.safe_dump(found, width=200)
    assert browser.get("/admin/").status_code == 200  # signed in throughout
    assert len(saves) > 15 and len(actions) > 25 and cuts > 100, (len(saves), len(actions), cuts)
