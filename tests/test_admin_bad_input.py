"""No page of the admin answers input it cannot take with a 500: as a platform admin, each
registered model's add page is asked with each of its form's fields as text it cannot read,
and its form and a change page's (of one of its rows) are sent with each field as every kind
of wrong value in turn, the others as the page filled them; each list is asked with its
filters, sorting, paging and search as text it cannot read; each list's actions are run on
selections naming no row, and change pages are asked for ids naming none. After it, what it
found in django-celery-beat's pages (jobs.admin's forms for them), each on its own; what it
found in mlsched's own pages is in the tests of those pages."""

import re
from collections import Counter
from datetime import date, timedelta
from urllib.parse import parse_qsl, quote

import pytest
import yaml
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client, RequestFactory
from django.utils import timezone
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from clusters.models import Booking, Cluster, MaintenanceWindow
from jobs.records import BudgetAlert
from quotas import history, tokens
from quotas.models import ScimGroup, SignIn, Tenant
from tests.test_api_bad_input import platform  # noqa: F401 (a fixture)
from tests.test_openapi import root, world  # noqa: F401
from tests.test_portal_bad_input import Forms, html_of

pytestmark = pytest.mark.django_db(transaction=True)

# What a field may be wrong with, by its kind (tests/test_portal_bad_input.py's values, but a
# NUL, which the middleware refuses before any view, and a word where any text is right):
# none, numbers past every column's end, negative, a long text; a word where a number, a
# date or a choice belongs; a date no calendar has; broken and wrongly shaped JSON where JSON
# is typed; a tick box the other way.
TYPED = ["", "9" * 40, "-1", "x" * 70_000]
WRONG = {
    "text": TYPED,
    "number": ["", "x", "9" * 40, "-1"],  # an amount, or an id (in a select, or hidden)
    # An inline's count of rows; one past what the page holds is refused as too many forms,
    # none built past it (admin_scope.InlinesCapped).
    "count": ["", "x", "-1", "1000000"],
    "date": ["", "x", "9" * 40, "2026-13-45"],
    "json": [*TYPED, "x", "{", "[]", "null", '{"a": ['],
    "on": [""],
    "off": ["on"],
}
# On an add page whose change page is tried too, one value that makes a field of its kind
# wrong: what the form's own checks read without (the field's own are the change page's).
WRONG_ON_ADD = {"text": "x" * 70_000, "json": "{", "on": "", "off": "on"}
# What an add page's query (its form's initial values) and a list's parameters are asked as.
ASKED = ["x", "9" * 40, "2026-13-45"]
# The parameters every list reads besides its filters' (its links name those): search,
# sorting, paging, a popup's field.
LIST_QUERY = ["q", "o", "p", "_to_field"]
# Selections naming no row, and ids no change page has.
WRONG_IDS = ["", "x", "9" * 40, "1.5"]


class AdminForms(Forms):
    """The portal test's forms, a select sent as the option the page chose (a foreign key, a
    choice: Django's admin marks it), and each field's kind (WRONG's keys; "on" a ticked
    box, "off" one not ticked, which a browser does not send; "json" a text area holding
    JSON)."""

    def __init__(self):
        super().__init__()
        self.kinds: dict[str, str] = {}
        self._select: tuple[str, bool] | None = None

    def handle_starttag(self, tag, attrs):
        super().handle_starttag(tag, attrs)
        attrs = dict(attrs)
        name = attrs.get("name")
        if tag == "option" and self._select and "selected" in attrs and self.forms:
            self.chosen(*self._select, attrs.get("value") or "")
        if tag == "select" and name:
            self._select = (name, "multiple" in attrs)
        if name and tag in ("input", "select", "textarea"):
            self.kinds[name] = self.kind(tag, attrs, self.kinds.get(name, "off"))
        if name and name.endswith("_FORMS"):  # TOTAL_FORMS, INITIAL_FORMS...
            self.kinds[name] = "count"

    @staticmethod
    def kind(tag: str, attrs: dict, before: str) -> str:
        """A field's kind by its tag and attributes (`before`: a box's, one of its name seen
        before, as a radio button's)."""
        said = attrs.get("type") if tag == "input" else tag
        if said in ("checkbox", "radio"):
            return "on" if "checked" in attrs else before
        hidden_number = said == "hidden" and (attrs.get("value") or "x").isdigit()
        if said in ("number", "select") or hidden_number:
            return "number"  # a select's options are ids or codes, wrong alike; a row's id
        dated = {"vDateField", "vTimeField"} & set((attrs.get("class") or "").split())
        return "date" if dated else "text"

    def handle_data(self, data):
        super().handle_data(data)
        if self._textarea and data.lstrip()[:1] in ("{", "["):  # JSON is typed here
            self.kinds[self._textarea] = "json"

    def chosen(self, name: str, multiple: bool, value: str) -> None:
        values = self.forms[-1][2]
        values[name] = [*(values.get(name) or []), value] if multiple else value

    def handle_endtag(self, tag):
        super().handle_endtag(tag)
        if tag == "select":
            self._select = None


def the_form(html: str) -> tuple[dict, dict]:
    """The page's form posted to the page itself (the add or change form, not the logout
    button's): what it sends, and its fields' kinds."""
    parser = AdminForms()
    parser.feed(html)
    posted = [values for action, method, values in parser.forms
              if method == "post" and not action]  # fmt: skip
    return (posted[0] if posted else {}), parser.kinds


def fields_tried(kinds: dict, values: dict, adding: bool) -> list[str]:
    """The form's fields but its buttons, its CSRF token, the blank row a script copies to add
    one (`quotas-__prefix__-flavor`) and the rows' deletion boxes (a deleted row's page could
    not be tried); of each inline, one row's fields: a new row's on an add page, a stored
    row's and the inline's counts of rows on a change page."""
    seen, names = set(), []
    for name in kinds:
        if name.startswith("_") or name == "csrfmiddlewaretoken" or "__prefix__" in name:
            continue
        key: object = name
        if row := re.fullmatch(r"(.+)-(\d+)-(.+)", name):
            prefix, number, field = row.groups()
            stored = bool(values.get(f"{prefix}-{number}-id"))
            if stored == adding or field == "DELETE":
                continue
            key = (prefix, field)
        elif name.endswith(("MIN_NUM_FORMS", "MAX_NUM_FORMS")) or (
            adding and name.endswith("_FORMS")
        ):  # Django reads neither of the first two
            continue
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


def the_world(root) -> None:  # noqa: F811
    """A row of each model the admin shows that the API's world (`platform`) has none of."""
    alpha, east = Tenant.objects.get(slug="alpha"), Cluster.objects.get(name="east")
    now = timezone.now()
    day = timedelta(days=1)
    window = MaintenanceWindow.objects.create(
        cluster=east, starts_at=now + day, ends_at=now + 2 * day, reason="disks"
    )
    window.nodes.set(east.nodes.all()[:1])
    Booking.objects.create(
        tenant=alpha, cluster=east, starts_at=now + 3 * day, ends_at=now + 4 * day, reason="paper"
    )
    tokens.create_token(root, "laptop")
    SignIn.objects.create(username="alice", method="password", succeeded=False,
                          address="10.0.0.1", reason="wrong password")  # fmt: skip
    ScimGroup.objects.create(display_name="ml", external_id="g1").members.add(root)
    BudgetAlert.objects.create(tenant=alpha, month=date(2026, 1, 1), percent=80,
                               budget_gpu_hours=100, spent_gpu_hours=80.0)  # fmt: skip
    history.record(root, [alpha], "Changed the fair share")
    Group.objects.create(name="ops")
    crontab = CrontabSchedule.objects.create(minute="30", hour="3")
    IntervalSchedule.objects.create(every=10, period=IntervalSchedule.MINUTES)
    SolarSchedule.objects.create(event="sunrise", latitude=52.5, longitude=13.4)
    ClockedSchedule.objects.create(clocked_time=now + timedelta(days=1))
    PeriodicTask.objects.create(name="nightly", task="jobs.tasks.retention", crontab=crontab)


def listing(model) -> str:
    return f"/admin/{model._meta.app_label}/{model._meta.model_name}/"


def form_pages(request) -> list[tuple[str, bool]]:
    """Every registered model's add page, and the change page of its first row (a user other
    than the one asking: a wrong value saved there could sign them out); each with whether
    its form is tried with every kind of wrong value (try_form's `full`)."""
    found = []
    for model, model_admin in admin.site._registry.items():
        rows = model._default_manager.order_by("pk")
        if model is get_user_model():
            rows = rows.exclude(pk=request.user.pk)
        first = rows.first()
        if model_admin.has_add_permission(request):
            found.append((f"{listing(model)}add/", first is None))
        if first is not None:
            found.append((f"{listing(model)}{quote(str(first.pk))}/change/", True))
    return found


class Sender:
    """A platform admin's browser that counts what it sends and keeps the 500s it is
    answered: (method, page, the wrong fields)."""

    def __init__(self, user):
        self.browser = Client(raise_request_exception=False)
        self.browser.force_login(user)
        self.sent: Counter[str] = Counter()  # by method
        self.failures: list = []

    def __call__(self, method: str, page: str, fields: dict, wrong: dict | None = None):
        answer = getattr(self.browser, method)(page, fields)
        self.sent[method] += 1
        if answer.status_code >= 500:
            shown = {name: str(value)[:40] for name, value in (wrong or fields).items()}
            self.failures.append([method, page, shown])
        return answer


def try_form(send: Sender, page: str, full: bool) -> dict:
    """An add page asked with each of its form's fields as a word (its initial values); the
    page's form sent with each field wrong in turn, as every kind of wrong value if `full` (a
    change page, or an add page of a model with no row), else as WRONG_ON_ADD. A save that
    went through of a form saying what it drew (quotas.admin's Drawn forms) is followed by its
    page read again, lest the next send be refused as a save over a change made since."""
    shown = send.browser.get(page)
    assert shown.status_code == 200, page
    values, kinds = the_form(html_of(shown))
    adding = page.endswith("/add/")
    if adding:
        asked = {re.sub(r"_[01]$", "", name) for name in fields_tried(kinds, values, adding)}
        for name in sorted(name for name in asked if "-" not in name):  # the form's own
            send("get", page, {name: "x"})
    if "_save" not in values:  # a page to look at only: a send is refused as a whole
        send("post", page, values)
        return values
    for name in fields_tried(kinds, values, adding):
        for value in WRONG[kinds[name]] if full else [WRONG_ON_ADD.get(kinds[name], "x")]:
            saved = send("post", page, {**values, name: value}, {name: value}).status_code
            if saved == 302 and any(name.endswith("drawn") for name in values):
                values = the_form(html_of(send.browser.get(page)))[0]
    return values


def list_parameters(html: str) -> set[str]:
    """The query parameters the list's own links use (its filters': `?state__exact=`), and
    those every list reads."""
    found = set(LIST_QUERY)
    for link in html.split('href="?')[1:]:
        query = link.split('"', 1)[0].replace("&amp;", "&")
        found |= {name for name, _ in parse_qsl(query, keep_blank_values=True)}
    return found


def try_list(send: Sender, model, request) -> None:
    """A list asked with each of its parameters wrong, each of its actions (and one it has
    not) run on selections naming no row, and a change page asked for ids naming none."""
    listed = listing(model)
    for name in sorted(list_parameters(html_of(send.browser.get(listed)))):
        for value in ASKED:
            send("get", listed, {name: value})
    for action in admin.site._registry[model].get_actions(request):
        for wrong in WRONG_IDS:
            send("post", listed, {"action": action, "index": "0", "_selected_action": wrong})
    send("post", listed, {"action": "nothing", "index": "x", "_selected_action": "1"})
    for wrong in WRONG_IDS[1:]:
        send("get", f"{listed}{quote(wrong)}/change/", {})


@pytest.fixture
def admins_world(platform, root):  # noqa: F811
    the_world(root)
    request = RequestFactory().get("/")
    request.user = root
    return request


def test_no_admin_page_answers_wrong_input_with_a_500(admins_world, root):  # noqa: F811
    send = Sender(root)
    forms = {page: try_form(send, page, full) for page, full in form_pages(admins_world)}
    for model in admin.site._registry:
        try_list(send, model, admins_world)

    assert not send.failures, yaml.safe_dump(send.failures[:40], width=200)
    assert send.browser.get("/admin/").status_code == 200  # signed in throughout
    assert {"name", "slug", "fair_share_weight", "quotas-0-flavor", "memberships-0-user"} <= (
        forms["/admin/quotas/tenant/add/"].keys()
    )
    assert send.sent["post"] > 800 and send.sent["get"] > 500, send.sent  # found and sent


# What the test above found in django-celery-beat's pages (jobs.admin's forms for them).


@pytest.fixture
def beat(db):
    """A platform admin's browser, and the nightly task on its crontab schedule."""
    browser = Client(raise_request_exception=False)
    browser.force_login(get_user_model().objects.create_superuser("root", "r@example.com", "pw"))
    crontab = CrontabSchedule.objects.create(minute="30", hour="3")
    task = PeriodicTask.objects.create(name="nightly", task="jobs.tasks.retention", crontab=crontab)
    return browser, task, crontab


def sent_back(browser, page: str, **changes):
    """The page's form sent back as the page filled it, `changes` over it."""
    values, _ = the_form(html_of(browser.get(page)))
    return browser.post(page, {**values, **changes})


def test_a_periodic_task_named_past_its_fields_length_is_an_error_on_the_task(beat):
    browser, task, _ = beat

    page = sent_back(browser, f"/admin/django_celery_beat/periodictask/{task.pk}/change/",
                     task="x" * 201, description="changed")  # fmt: skip

    assert page.status_code == 200
    assert "task" in page.context["adminform"].form.errors
    assert PeriodicTask.objects.get(pk=task.pk).description == ""


def test_a_periodic_tasks_headers_left_empty_are_saved_as_none(beat):
    browser, task, _ = beat

    page = sent_back(browser, f"/admin/django_celery_beat/periodictask/{task.pk}/change/",
                     headers="")  # fmt: skip

    assert page.status_code == 302
    assert PeriodicTask.objects.get(pk=task.pk).headers == "{}"


def test_periodic_task_headers_that_are_no_json_are_an_error_on_them(beat):
    browser, task, _ = beat

    page = sent_back(browser, f"/admin/django_celery_beat/periodictask/{task.pk}/change/",
                     headers="{")  # fmt: skip

    assert page.status_code == 200
    assert "headers" in page.context["adminform"].form.errors


@pytest.mark.parametrize("field", ["minute", "hour", "day_of_month", "month_of_year",
                                   "day_of_week"])  # fmt: skip
def test_a_crontab_field_the_beat_scheduler_cannot_read_is_an_error_on_it(beat, field):
    browser, _, crontab = beat

    page = sent_back(browser, f"/admin/django_celery_beat/crontabschedule/{crontab.pk}/change/",
                     **{field: "-1"})  # fmt: skip

    assert page.status_code == 200
    assert "The beat scheduler cannot read it" in page.context["adminform"].form.errors[field][0]
    assert getattr(CrontabSchedule.objects.get(pk=crontab.pk), field) != "-1"


def test_a_crontabs_time_zone_sent_back_as_no_name_is_no_error(beat):
    browser, _, crontab = beat

    page = sent_back(browser, f"/admin/django_celery_beat/crontabschedule/{crontab.pk}/change/",
                     **{"initial-timezone": "x" * 300, "hour": "4"})  # fmt: skip

    assert page.status_code == 302
    assert CrontabSchedule.objects.get(pk=crontab.pk).hour == "4"


@pytest.mark.parametrize("page", ["periodictask", "clockedschedule"])
def test_a_schedules_add_page_leaves_out_a_time_from_its_address_that_is_none(beat, page):
    browser, _, _ = beat

    answer = browser.get(f"/admin/django_celery_beat/{page}/add/",
                         {"start_time": "x", "expires": "x", "clocked_time": "x"})  # fmt: skip

    assert answer.status_code == 200
