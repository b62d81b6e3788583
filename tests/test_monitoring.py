"""docs/monitoring/, what mlsched ships for Prometheus and Grafana: the alerting rules
(alerts.yml) are whole, the dashboard (dashboard.json) is Grafana's model, and every metric and
label a rule's or a panel's expression or text reads is one GET /metrics gives (a rule over a
renamed metric would never fire, a panel would stay empty, and nobody would know)."""

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.utils import timezone

from jobs import actions, cycle
from jobs.states import State
from quotas.models import Quota
from tests.factories import ClusterFactory, JobFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db

SHIPPED = Path(__file__).resolve().parent.parent / "docs" / "monitoring"
RULES, DASHBOARD = SHIPPED / "alerts.yml", SHIPPED / "dashboard.json"
SAMPLE = re.compile(r"^(mlsched_\w+)(?:\{(.*)\})? ")
METRIC = re.compile(r"\bmlsched_\w+")
# Label names read by an expression (`{cluster=...}`, `by (shard)`) or a text (`$labels.x`,
# a legend's `{{cluster}}`).
MATCHED = re.compile(r"[{,]\s*(\w+)\s*(?:=~|!~|!=|=)")
GROUPED = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
SAID = re.compile(r"\$labels\.(\w+)|\{\{\s*(\w+)\s*\}\}")


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]]  # fmt: skip


def panels() -> list[dict]:
    return json.loads(DASHBOARD.read_text())["panels"]


def queries() -> list[tuple[str, str, str]]:
    """Every expression shipped: where it is, the expression, and the text naming its labels."""
    alerting = [(rule["alert"], rule["expr"], str(rule["annotations"])) for rule in rules()]
    drawn = [(panel["title"], target["expr"], target.get("legendFormat", ""))
             for panel in panels() for target in panel["targets"]]  # fmt: skip
    return alerting + drawn


def said(text: str) -> set[str]:
    return {name for pair in SAID.findall(text) for name in pair if name}


def exposed(lines: list[str]) -> dict[str, set[str]]:
    """Each metric /metrics gives (its TYPE line), with the label names its samples carry."""
    names: dict[str, set[str]] = {}
    for line in lines:
        if line.startswith("# TYPE "):
            names.setdefault(line.split()[2], set())
        elif match := SAMPLE.match(line):
            labels = match.group(2) or ""
            names.setdefault(match.group(1), set()).update(re.findall(r'(\w+)="', labels))
    return names


@pytest.fixture
def platform_running():
    """A platform with a figure for each rule: a cluster whose agent reports, a started job and
    one waiting for GPUs, a team with a GPU-hour budget, a spend alert and a quota."""
    east = ClusterFactory(name="east", last_heartbeat=timezone.now())
    NodeFactory(cluster=east, gpu_count=8)
    alpha = TenantFactory(slug="alpha", gpu_hours_per_month=100, spend_alert_per_month=1000)
    Quota.objects.create(tenant=alpha, flavor="gpu:A100", guaranteed=8)
    job = JobFactory(gpus=1, created=timezone.now() - timedelta(seconds=30))
    JobFactory(gpus=8)
    cycle.run_cycle()
    job.refresh_from_db()
    actions.transition(job, State.RUNNING, "started")


def test_every_rule_is_whole_and_says_what_to_do():
    for rule in rules():
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["alert"].startswith("Mlsched")
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert set(rule["annotations"]) == {"summary", "description"}


def test_the_dashboard_is_grafanas_model_with_a_prometheus_source_chosen_on_import():
    dashboard = json.loads(DASHBOARD.read_text())

    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36
    assert dashboard["templating"]["list"][0]["type"] == "datasource"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["type"] in {"timeseries", "stat"} and panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_metric_and_label_a_rule_or_panel_reads_is_one_the_platform_exposes(
    platform_running, scrape
):
    given = exposed(scrape())

    for where, expr, text in queries():
        metrics = set(METRIC.findall(expr))
        assert metrics and metrics <= set(given), (where, metrics - set(given))
        read = set(MATCHED.findall(expr)) | said(text)
        for grouped in GROUPED.findall(expr):
            read |= {name.strip() for name in grouped.split(",") if name.strip()}
        carried = set().union(*(given[name] for name in metrics))
        assert read <= carried, (where, read - carried)
