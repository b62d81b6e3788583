"""A form drawn again with an error ties the message to its field for screen readers: the field's
control is aria-invalid="true" and its aria-describedby names the element holding the message,
on every portal form (jobs.forms.described, and Django's own rendering of the password form)."""

from html.parser import HTMLParser

import pytest

from jobs.models import Job
from jobs.states import State
from jobs.views import SUBMIT_HELPS
from tests.factories import JobFactory, PriorityClassFactory
from tests.jobs.test_portal import FORM

pytestmark = pytest.mark.django_db

CONTROLS = {"input", "select", "textarea"}
VOID = {"input", "br", "img", "meta", "link", "hr", "wbr"}


class Page(HTMLParser):
    """A page's form controls (their attributes, by name) and the text of its elements that
    have an id."""

    def __init__(self, html: str):
        super().__init__()
        self.controls: dict[str, dict[str, str]] = {}
        self.texts: dict[str, str] = {}
        self.open: list[str | None] = []  # the id of each open element, or None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        found = {name: value or "" for name, value in attrs}
        if tag in CONTROLS and "name" in found:
            self.controls.setdefault(found["name"], found)
        if found.get("id"):
            self.texts.setdefault(found["id"], "")
        if tag not in VOID:
            self.open.append(found.get("id"))

    def handle_endtag(self, tag):
        if tag not in VOID and self.open:
            self.open.pop()

    def handle_data(self, data):
        for pk in filter(None, self.open):
            self.texts[pk] += data

    def description(self, name: str) -> str:
        """The text of what describes the control `name`, as a screen reader reads it."""
        ids = self.controls[name].get("aria-describedby", "").split()
        return " ".join(self.texts[pk].strip() for pk in ids)


def assert_tied(page: Page, name: str, message: str) -> None:
    control = page.controls[name]
    assert control.get("aria-invalid") == "true", control
    assert message in page.description(name), (control, page.texts)


def assert_untouched(page: Page, name: str) -> None:
    control = page.controls[name]
    assert "aria-invalid" not in control, control
    assert "error" not in control.get("aria-describedby", ""), control


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cpu_milli": "0"}, "cpu_milli"),
        ({"command": 'python -c "print(1)'}, "command"),
        ({"env": "A=1\nnope"}, "env"),
        ({"priority_class": "platinum"}, "priority_class"),
        ({"depends_on": "afterwhenever:12"}, "depends_on"),
    ],
)
def test_a_submit_forms_error_describes_its_field(client, alice, changes, field):
    PriorityClassFactory(name="normal", value=0)
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, **changes})

    page = Page(response.text)
    assert response.status_code == 400
    assert_tied(page, field, response.context["errors"][field])
    # A field with a help text is described by both.
    described = [SUBMIT_HELPS[field]] if field in SUBMIT_HELPS else []
    assert page.controls[field]["aria-describedby"] == " ".join([*described, f"id_{field}_error"])
    assert_untouched(page, "name")


def test_a_singleton_refusal_describes_the_dependencies_it_is_typed_in(client, alice, alpha):
    PriorityClassFactory(name="normal", value=0)
    other = JobFactory(tenant=alpha, owner=alice, state=State.SUCCEEDED)
    client.force_login(alice)

    response = client.post("/jobs/new/", {**FORM, "depends_on": f"afternotok:{other.pk}"})

    page = Page(response.text)
    assert response.status_code == 400
    assert_tied(page, "depends_on", "succeeded")


def test_a_submit_form_without_errors_marks_no_field(client, alice):
    PriorityClassFactory(name="normal", value=0)
    client.force_login(alice)

    page = Page(client.get("/jobs/new/").text)

    for name in page.controls:
        assert_untouched(page, name)


@pytest.fixture
def queued(alice, alpha) -> Job:
    PriorityClassFactory(name="normal", value=0)
    return JobFactory(tenant=alpha, owner=alice)


def test_a_refused_priority_describes_the_priority_field(client, alice, queued):
    client.force_login(alice)

    response = client.post(f"/jobs/{queued.pk}/priority/", {"priority": "5000"})

    page = Page(response.text)
    assert response.status_code == 400
    assert page.controls["priority"]["aria-describedby"] == "error"
    assert_tied(page, "priority", "1000")
    assert_untouched(page, "priority_class")
    assert_untouched(page, "dependencies")


def test_a_refused_priority_class_describes_the_class_field(client, alice, queued):
    client.force_login(alice)

    response = client.post(f"/jobs/{queued.pk}/priority/", {"priority_class": "platinum"})

    page = Page(response.text)
    assert response.status_code == 400
    assert_tied(page, "priority_class", "platinum")
    assert_untouched(page, "priority")


def test_refused_dependencies_describe_the_field_after_its_help(client, alice, queued):
    client.force_login(alice)

    response = client.post(f"/jobs/{queued.pk}/dependencies/", {"dependencies": str(queued.pk)})

    page = Page(response.text)
    assert response.status_code == 400
    assert page.controls["dependencies"]["aria-describedby"] == "dependencies-help error"
    assert_tied(page, "dependencies", "itself")
    assert_untouched(page, "priority")


def test_a_refusal_about_no_field_marks_none(client, alice, queued):
    client.force_login(alice)

    response = client.post(f"/jobs/{queued.pk}/release/")  # not held: a 409

    page = Page(response.text)
    assert response.status_code == 409
    for name in ("priority_class", "priority", "dependencies"):
        assert_untouched(page, name)
    assert page.controls["dependencies"]["aria-describedby"] == "dependencies-help"


def test_a_password_change_error_describes_its_field(client, alice):
    client.force_login(alice)

    response = client.post(
        "/accounts/password/",
        {"old_password": "wrong", "new_password1": "a-long-new-one", "new_password2": "other"},
    )

    page = Page(response.text)
    assert response.status_code == 200  # Django's form view draws its errors with a 200
    assert_tied(page, "old_password", "old password was entered incorrectly")
    assert_tied(page, "new_password2", "didn’t match")
    assert_untouched(page, "new_password1")


def test_a_token_forms_error_describes_its_field(client, alice):
    client.force_login(alice)

    response = client.post("/tokens/", {"name": " ", "expires": ""})

    page = Page(response.text)
    assert response.status_code == 400
    assert_tied(page, "name", "Give the token a name")
    assert_untouched(page, "expires")


@pytest.mark.parametrize(
    ("url", "field", "message"),
    [
        ("/?state=sleeping", "state", "One of"),
        ("/?held=maybe", "held", "1 or 0"),
        ("/?q=" + "a" * 201, "q", "At most 200"),
        ("/usage/?since=2024-13-01", "since", "since"),
    ],
)
def test_a_bad_filter_describes_its_field(client, alice, url, field, message):
    client.force_login(alice)

    response = client.get(url)

    assert response.status_code == 400
    assert_tied(Page(response.text), field, message)
