"""Hostile input to every URL is never a 500. Generated bodies and query strings (wrong types,
nulls, huge and non-finite numbers, NUL, lone surrogates, non-ASCII digits, nesting where a
scalar belongs, duplicated keys, other tenants' ids) get a 4xx naming what is wrong, and a
refused request writes nothing. The fixed cases after the generated ones are those that once
failed."""

import json
from decimal import Decimal
from urllib.parse import quote

import hypothesis
import pytest
from django.contrib.auth.models import Group
from django_celery_beat.models import CrontabSchedule
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from clusters.models import Node
from jobs import forms
from jobs.models import Dependency, Job, JobEvent, LogChunk
from jobs.serializers import SubmitSerializer
from jobs.states import State
from quotas.models import ApiToken, Rate
from tests.factories import (
    AttemptFactory,
    ClusterFactory,
    JobFactory,
    PriorityClassFactory,
    UserFactory,
)
from tests.security.test_bad_input import SPEC

pytestmark = pytest.mark.django_db

FUZZ = hypothesis.settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

LONE_SURROGATES = ["\ud800", "\udfff", "a\udc80b"]
ODD_TEXT = [
    "", " ", "\x00", "a\x00b", "١٢", "𝟙𝟚", "1_000", " 1 ", "1.0", "-0", "0x10", "1e400", "NaN",
    "Infinity", "-inf", "9" * 25, "x" * 70_000, "\u202e", "é", "null", "[]", "{}", "training",
    "alpha", "gamma", "normal", "afterok", "stdout", "running", "exited", "2025-02-30",
    "0001-01-01", "9999-12-31",
]  # fmt: skip
HUGE_INTS = [-1, 0, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30]
# Stand-ins for ids known only once the fixtures have run (see `resolved`).
MINE, THEIRS, SHARD, ATTEMPT, ELSEWHERE = "@mine", "@theirs", "@shard", "@attempt", "@elsewhere"

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(HUGE_INTS),
    st.integers(),
    st.floats(),  # NaN and Infinity too: JSON has no such numbers
    st.sampled_from(ODD_TEXT + LONE_SURROGATES),
    st.text(max_size=12),
)
KEYS = st.one_of(st.text(max_size=8), st.sampled_from(["id", "kind", "\ud800", "\x00", "a b"]))
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
JOB_IDS = st.one_of(st.sampled_from([MINE, THEIRS, SHARD, "١٢", "12", 1.0, 1.5, True]), SCALARS)
DEPENDENCY_ITEMS = st.one_of(
    JOB_IDS,
    st.fixed_dictionaries(
        {"id": JOB_IDS},
        optional={
            "kind": st.one_of(st.sampled_from(["afterok", "afterany", "afternotok"]), SCALARS)
        },
    ),
    JSON_VALUES,
)
# Form fields and query strings are bytes on the wire: no lone surrogate reaches them.
FORM_TEXT = st.one_of(
    st.sampled_from(ODD_TEXT + ["a=\x00", "\x00=a", "é=1", "=x", "A=1\r\nA=2", "a b=c"]),
    st.sampled_from(["afterok:" + "9" * 25, "afterany:١٢", "singleton", "afternotok:1:2:3",
                     ":::", ",,,", "#", "none", "after:1", "afterok:-1", "afterok:0",
                     f"afterok:{THEIRS}", f"afterany:{SHARD}", f"{MINE}, {MINE}"]),
    st.text(max_size=40),
)  # fmt: skip
QUERY_VALUES = st.one_of(
    FORM_TEXT.map(quote),
    st.integers().map(str),
    st.dates().map(str),
    st.sampled_from(["%ff%fe", "%ED%A0%80", "%C0%80", "%00", "queued", "QUEUED", "%25", "_"]),
)


@pytest.fixture(autouse=True)
def roomy_rates(settings):
    # Hundreds of requests a minute, each of which must get its own answer, not a 429.
    settings.MLSCHED_API_RATE = "1000000/minute"
    settings.MLSCHED_SUBMIT_RATE = "1000000/minute"
    settings.MLSCHED_TENANT_SUBMIT_RATE = "1000000/minute"


@pytest.fixture
def ids(alice, alpha, charlie, gamma, east):
    """The ids the stand-ins name: a queued job of Alice's, a job of Charlie's tenant, a batch's
    second shard, a running attempt on east and one on another cluster."""
    PriorityClassFactory()
    mine = JobFactory(tenant=alpha, owner=alice)
    batch = JobFactory(tenant=alpha, owner=alice, family="batch_inference", shards=2)
    shard = JobFactory(tenant=alpha, owner=alice, family="batch_inference", shards=2,
                       parent=batch, shard_index=1)  # fmt: skip
    running, also = (JobFactory(tenant=alpha, owner=alice, state=State.RUNNING) for _ in "ab")
    return {
        MINE: mine.pk,
        THEIRS: JobFactory(tenant=gamma, owner=charlie).pk,
        SHARD: shard.pk,
        ATTEMPT: AttemptFactory(job=running, cluster=east).pk,
        ELSEWHERE: AttemptFactory(job=also, cluster=ClusterFactory()).pk,
    }


def resolved(value, ids: dict):
    """`value` with every stand-in replaced by its id."""
    if isinstance(value, str):
        if value in ids:
            return ids[value]
        for name, pk in ids.items():
            value = value.replace(name, str(pk))
        return value
    if isinstance(value, list):
        return [resolved(item, ids) for item in value]
    if isinstance(value, dict):
        return {key: resolved(item, ids) for key, item in value.items()}
    return value


def written() -> tuple:
    return (Job.objects.count(), Dependency.objects.count(), JobEvent.objects.count(),
            Node.objects.count(), LogChunk.objects.count(), ApiToken.objects.count())  # fmt: skip


def assert_answered(response, *, names: str | None = None):
    """Not a 500; a 400 names `names`, or says the body is no JSON at all."""
    assert response.status_code < 500, response.content[:300]
    if response.status_code == 400 and names is not None:
        text = response.content.decode()
        assert names in text or "JSON parse error" in text, text[:300]


def post_json(client, url: str, body: str):
    return client.post(url, body, content_type="application/json")


# 1. The users' API.


@FUZZ
@given(
    field=st.sampled_from(sorted(SubmitSerializer().fields)),
    value=JSON_VALUES,
    duplicated=st.booleans(),
)
def test_a_submission_with_any_field_odd_is_a_4xx_naming_it_and_writes_nothing(
    api, ids, field, value, duplicated
):
    value = resolved(value, ids)
    if duplicated:  # the spec's own value first, then the odd one: the last counts
        body = json.dumps(SPEC)[:-1] + f", {json.dumps(field)}: {json.dumps(value)}}}"
    else:
        body = json.dumps({**SPEC, field: value})
    before = written()

    response = post_json(api, "/api/v1/jobs/", body)

    assert_answered(response, names=field)
    if response.status_code >= 400:
        assert written() == before


@hypothesis.settings(FUZZ, max_examples=25)
@given(body=st.one_of(JSON_VALUES, st.dictionaries(st.sampled_from([*SPEC, "env"]), JSON_VALUES)))
def test_any_json_body_submitted_is_answered_and_a_refusal_writes_nothing(api, ids, body):
    before = written()

    response = post_json(api, "/api/v1/jobs/", json.dumps(resolved(body, ids)))

    assert_answered(response)
    if response.status_code >= 400:
        assert written() == before


@hypothesis.settings(FUZZ, max_examples=40)
@given(
    depends_on=st.one_of(st.lists(DEPENDENCY_ITEMS, max_size=3), JSON_VALUES),
    singleton=st.one_of(st.booleans(), SCALARS),
    where=st.sampled_from(["submit", "change"]),
)
def test_any_dependencies_are_a_4xx_naming_them_and_write_nothing(
    api, ids, depends_on, singleton, where
):
    fields = {"depends_on": resolved(depends_on, ids), "singleton": singleton}
    before = written()

    if where == "submit":
        response = post_json(api, "/api/v1/jobs/", json.dumps({**SPEC, **fields}))
    else:
        url = f"/api/v1/jobs/{ids[MINE]}/dependencies/"
        response = post_json(api, url, json.dumps(fields))

    assert_answered(response)
    if response.status_code == 400:
        assert {"depends_on", "singleton"} & set(response.json()) or "detail" in response.json()
    if response.status_code >= 400:
        assert written() == before


JOB_PATHS = [
    ("get", "/api/v1/jobs/{}/"),
    ("get", "/api/v1/jobs/{}/events/"),
    ("get", "/api/v1/jobs/{}/spec/"),
    ("get", "/jobs/new/?copy={}"),
    ("get", "/api/v1/jobs/{}/logs/"),
    ("get", "/api/v1/jobs/{}/logs.txt"),
    ("post", "/api/v1/jobs/{}/cancel/"),
    ("post", "/api/v1/jobs/{}/hold/"),
    ("post", "/api/v1/jobs/{}/release/"),
    ("post", "/api/v1/jobs/{}/requeue/"),
    ("post", "/api/v1/jobs/{}/resubmit/"),
    ("post", "/api/v1/jobs/{}/dependencies/"),
    ("post", "/api/v1/jobs/{}/labels/"),
    ("post", "/api/v1/jobs/{}/runtime-limit/"),
    ("post", "/api/v1/jobs/{}/request/"),
    ("post", "/api/v1/jobs/{}/constraints/"),
    ("get", "/jobs/{}/"),
    ("post", "/jobs/{}/cancel/"),
    ("post", "/jobs/{}/hold/"),
    ("post", "/jobs/{}/release/"),
    ("post", "/jobs/{}/requeue/"),
    ("post", "/jobs/{}/resubmit/"),
    ("post", "/jobs/{}/dependencies/"),
    ("post", "/jobs/{}/runtime-limit/"),
    ("post", "/jobs/{}/request/"),
    ("post", "/jobs/{}/constraints/"),
    ("post", "/tokens/{}/revoke/"),
]


@hypothesis.settings(FUZZ, max_examples=60)
@given(
    where=st.sampled_from(JOB_PATHS),
    pk=st.one_of(
        st.sampled_from([THEIRS, "١٢", "𝟙", "00", "-1", "9" * 25, "1.0", " 1", "x", "%00"]),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
    ),
)
def test_an_odd_or_foreign_id_in_a_path_is_a_404(api, portal, ids, where, pk):
    method, template = where
    client = api if template.startswith("/api/") else portal
    url = template.format(quote(str(resolved(pk, ids)), safe="%"))

    response = getattr(client, method)(url)

    assert_answered(response)
    if pk == THEIRS:
        assert response.status_code == 404


QUERIES = [
    ("/api/v1/jobs/", "state"),
    ("/jobs/new/", "copy"),
    ("/api/v1/jobs/", "id"),
    ("/api/v1/jobs/", "before"),
    ("/api/v1/jobs/", "batch"),
    ("/api/v1/jobs/@mine/logs/", "after"),
    ("/api/v1/usage/", "since"),
    ("/api/v1/usage/", "until"),
    ("/api/v1/usage/", "tenant"),
    ("/api/v1/usage/", "by_label"),
    ("/api/v1/usage/daily/", "since"),
    ("/api/v1/usage/daily/", "until"),
    ("/api/v1/usage/daily/", "tenant"),
    ("/api/v1/jobs/", "label"),
    ("/api/v1/nodes/", "state"),
    ("/api/v1/nodes/", "cluster"),
    ("/api/v1/nodes/", "gpu_type"),
    ("/api/v1/clusters/", "x"),
    ("/api/v1/queue/", "limit"),
    ("/api/v1/queue/", "after"),
    ("/api/v1/queue/", "tenant"),
    ("/api/v1/queue/", "mine"),
    ("/queue/", "mine"),
    ("/", "label"),
    ("/clusters/", "state"),
    ("/clusters/", "cluster"),
    ("/usage/", "by_label"),
    ("/", "state"),
    ("/", "tenant"),
    ("/", "q"),
    ("/", "before"),
    ("/usage/", "since"),
    ("/usage/", "until"),
    ("/usage/", "tenant"),
    ("/usage.csv", "since"),
    ("/usage.csv", "until"),
    ("/usage.csv", "tenant"),
    ("/usage-by-label.csv", "by_label"),
    ("/usage-daily.csv", "since"),
    ("/usage-daily.csv", "tenant"),
    ("/overview/", "x"),
    ("/queue/", "limit"),
    ("/queue/", "after"),
    ("/queue/", "tenant"),
    ("/tokens/", "x"),
    ("/metrics", "x"),
]


@hypothesis.settings(FUZZ, max_examples=120)
@given(where=st.sampled_from(QUERIES), value=QUERY_VALUES, again=st.booleans())
def test_any_query_parameter_is_a_4xx_naming_it(api, portal, ids, where, value, again):
    url, name = where
    api_call = url.startswith("/api/")
    query = f"{name}={value}" + (f"&{name}=1" if again else "")

    response = (api if api_call else portal).get(f"{resolved(url, ids)}?{query}")

    assert_answered(response, names=name if api_call else None)


@hypothesis.settings(FUZZ, max_examples=30)
@given(since=st.dates(), until=st.dates(), url=st.sampled_from(["/api/v1/usage/", "/usage/",
       "/usage.csv", "/api/v1/usage/daily/", "/usage-daily.csv"]))  # fmt: skip
def test_any_window_of_dates_is_a_report_or_a_400(api, portal, since, until, url):
    client = api if url.startswith("/api/") else portal

    response = client.get(url, {"since": str(since), "until": str(until)})

    assert_answered(response)


# 2. The portal's forms.


@hypothesis.settings(FUZZ, max_examples=40)
@given(field=st.sampled_from(forms.FIELDS + forms.TEXTAREAS), value=FORM_TEXT)
def test_the_submit_form_with_any_field_odd_is_answered_and_a_refusal_writes_nothing(
    portal, ids, field, value
):
    typed = {**SPEC, "command": "true", "priority_class": "normal"}
    before = written()

    response = portal.post("/jobs/new/", {**typed, field: resolved(value, ids)})

    assert_answered(response)
    if response.status_code >= 400:
        assert written() == before


@hypothesis.settings(FUZZ, max_examples=25)
@given(typed=FORM_TEXT)
def test_any_dependencies_typed_on_the_job_page_are_answered(portal, ids, typed):
    before = written()

    response = portal.post(f"/jobs/{ids[MINE]}/dependencies/", {"dependencies": typed})

    assert_answered(response)
    if response.status_code >= 400:
        assert written() == before


@hypothesis.settings(FUZZ, max_examples=20)
@given(name=FORM_TEXT, expires=FORM_TEXT | st.sampled_from(["30", "90", "365", "never"]))
def test_any_token_name_and_expiry_are_answered(portal, name, expires):
    before = written()

    response = portal.post("/tokens/", {"name": name, "expires": expires})

    assert_answered(response)
    if response.status_code >= 400:
        assert written() == before


# 3. The agents' API.

REPORTS = {
    "inventory": ("nodes", {"name": "n1", "cpu_milli": 1000, "memory_mb": 1000,
                            "gpu_type": "A100", "gpu_count": 1, "gpu_shareable": False,
                            "topology": {"zone": "a"}, "ready": True}),
    "heartbeat": ("workers", {"attempt_id": ATTEMPT, "rank": 0, "phase": "running",
                              "exit_code": None, "reason": "", "checkpoint_at": None}),
    "logs": ("lines", {"attempt_id": ATTEMPT, "rank": 0, "seq": 0, "stream": "stdout",
                       "text": "hi"}),
}  # fmt: skip
REPORT_FIELDS = [(kind, field) for kind, (_, item) in REPORTS.items() for field in item]


@hypothesis.settings(FUZZ, max_examples=60)
@given(
    where=st.sampled_from(REPORT_FIELDS),
    value=st.one_of(st.sampled_from([ATTEMPT, ELSEWHERE]), JSON_VALUES),
    twice=st.booleans(),
)
def test_an_agent_report_with_any_field_odd_is_a_400_naming_it_and_writes_nothing(
    agent, ids, where, value, twice
):
    agent.raise_request_exception = False
    kind, field = where
    key, item = REPORTS[kind]
    entry = resolved({**item, field: value}, ids)
    before = written()

    body = json.dumps({key: [entry] * (1 + twice)})
    response = post_json(agent, f"/api/v1/agent/east/{kind}/", body)

    # The same worker twice is refused for its rank, unless the odd field is refused first.
    assert_answered(response, names=None if twice else field)
    if response.status_code >= 400:
        assert written() == before


@hypothesis.settings(FUZZ, max_examples=25)
@given(kind=st.sampled_from(sorted(REPORTS)), body=JSON_VALUES, wrapped=st.booleans())
def test_any_agent_report_body_is_answered(agent, ids, kind, body, wrapped):
    agent.raise_request_exception = False
    key, _ = REPORTS[kind]
    body = {key: body} if wrapped else body

    response = post_json(agent, f"/api/v1/agent/east/{kind}/", json.dumps(resolved(body, ids)))

    assert_answered(response)


# 4. What the generated cases found.


@pytest.mark.parametrize("surrogate", LONE_SURROGATES)
def test_a_family_holding_a_lone_surrogate_is_a_400_naming_it(api, ids, surrogate):
    before = written()

    response = post_json(api, "/api/v1/jobs/", json.dumps({**SPEC, "family": surrogate}))

    assert response.status_code == 400
    assert "is not one of: training" in response.json()["family"][0]
    assert written() == before


@pytest.mark.parametrize("field", ["env", "cluster_selector"])
@pytest.mark.parametrize("value", [[], None, {"a": 1}])
def test_a_mapping_key_holding_a_lone_surrogate_is_a_400_naming_it(api, ids, field, value):
    before = written()

    response = post_json(api, "/api/v1/jobs/", json.dumps({**SPEC, field: {"\ud800": value}}))

    assert response.status_code == 400
    assert response.json() == {field: ["A key cannot hold a NUL or a lone surrogate."]}
    assert written() == before


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("heartbeat", "phase", "\ud800"),
        ("logs", "stream", "\ud800"),
        ("inventory", "topology", {"\ud800": []}),
    ],
)
def test_an_agent_report_holding_a_lone_surrogate_is_a_400_naming_the_field(
    agent, ids, kind, field, value
):
    agent.raise_request_exception = False
    key, item = REPORTS[kind]
    before = written()

    body = json.dumps({key: [resolved({**item, field: value}, ids)]})
    response = post_json(agent, f"/api/v1/agent/east/{kind}/", body)

    assert response.status_code == 400
    assert field in response.json()[key]["0"]
    assert written() == before


@pytest.fixture
def admin_client(client):
    client.raise_request_exception = False
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_an_admin_action_on_a_selection_that_is_no_id_runs_nothing(admin_client, alice):
    token = ApiToken.objects.create(user=alice, name="laptop", prefix="mls_x", key_hash="h")

    response = admin_client.post(
        "/admin/quotas/apitoken/", {"action": "revoke", "_selected_action": [token.pk, "x"]}
    )

    assert response.status_code == 302
    assert ApiToken.objects.filter(pk=token.pk).exists()


@pytest.mark.parametrize(
    ("url", "action"),
    [
        ("/admin/jobs/job/", "cancel_jobs"),
        ("/admin/clusters/cluster/", "rotate_agent_token"),
        ("/admin/clusters/node/", "cordon"),
        ("/admin/quotas/priorityclass/", "delete_selected"),
        ("/admin/quotas/quota/", "delete_selected"),
        ("/admin/quotas/rate/", "delete_selected"),
        ("/admin/auth/user/", "delete_selected"),
        ("/admin/auth/group/", "delete_selected"),
        ("/admin/django_celery_beat/periodictask/", "run_tasks"),
        ("/admin/django_celery_beat/periodictask/", "enable_tasks"),
        ("/admin/django_celery_beat/crontabschedule/", "delete_selected"),
        ("/admin/django_celery_beat/intervalschedule/", "delete_selected"),
        ("/admin/django_celery_beat/solarschedule/", "delete_selected"),
        ("/admin/django_celery_beat/clockedschedule/", "delete_selected"),
    ],
)  # fmt: skip
def test_an_admin_action_elsewhere_on_a_selection_that_is_no_id_runs_nothing(
    admin_client, url, action
):
    response = admin_client.post(url, {"action": action, "_selected_action": ["x"]})

    assert response.status_code == 302


@pytest.mark.parametrize(
    "make",
    [
        lambda: Rate.objects.create(flavor="gpu:A100", price=Decimal("2.5")),
        lambda: Group.objects.create(name="ops"),
        lambda: CrontabSchedule.objects.create(minute="30", hour="3"),
    ],
    ids=["rate", "group", "crontab"],
)
def test_a_bulk_deletion_of_a_row_and_an_id_that_is_none_deletes_nothing(admin_client, make):
    row = make()
    selection = {"action": "delete_selected", "_selected_action": [row.pk, "x"], "post": "yes"}

    response = admin_client.post(f"/admin/{row._meta.app_label}/{row._meta.model_name}/", selection)

    assert response.status_code == 302
    assert type(row).objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize(
    "path", ["{job}/permissions/user-manage/x/", "{job}/permissions/group-manage/x/"]
)
def test_a_job_permission_page_for_an_id_that_is_no_number_is_a_404(admin_client, ids, path):
    response = admin_client.get("/admin/jobs/job/" + path.format(job=ids[MINE]))

    assert response.status_code == 404
