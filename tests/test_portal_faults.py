"""A portal form that loses the database partway leaves nothing half-written and answers 503
with a page saying to try again: each form a team's owner or a platform admin is shown is sent
with its connection ended before its first write, then its second, and so on, until it runs
whole (tests/test_api_faults.py's `cut_until_whole`)."""

import pytest
import yaml

from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_api_faults import cut_until_whole
from tests.test_api_isolation import marked  # noqa: F401 (a fixture)
from tests.test_openapi import root, world  # noqa: F401
from tests.test_portal_isolation import browser, sound_forms

pytestmark = pytest.mark.django_db(transaction=True)


# The forms that sign out, or change the language alone: the others, the user's own account's
# among them (API tokens, the command line's login), are sent.
SIGN_OUT = ("/accounts/logout/", "/i18n/")


def ends_something(form) -> bool:
    """Whether a form ends what others change (a cancel, a removal, a deletion): those go last,
    so that the others find their things as they were."""
    where, _ = form
    return any(word in where for word in ("cancel", "delete", "remove", "revoke", "requeue"))


def test_a_form_that_loses_the_database_at_any_write_writes_nothing_and_answers_503(
    marked, alice, root  # noqa: F811
):  # fmt: skip
    owner, admin = browser(alice), browser(root)
    owners = {where for where, _ in sound_forms(marked, alice, leaving_out=SIGN_OUT)}
    forms = sound_forms(marked, alice, root, leaving_out=SIGN_OUT)
    found, cuts = {}, 0
    for where, fields in sorted(forms, key=ends_something):
        send = (owner if where in owners else admin).post
        form = (where, fields)
        wrong, made, _ = cut_until_whole(lambda form, send=send: send(*form), lambda f=form: f)
        found |= {f"{where} at write {at}": said for at, said in wrong.items()}
        cuts += made

    assert not found, yaml.safe_dump(found, width=200)
    assert cuts > 40  # the forms were found, and each cut where it writes
    assert {"/tokens/", "/teams/alpha/members/", "/jobs/new/"} <= {where for where, _ in forms}
