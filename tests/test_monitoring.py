"""docs/monitoring/alerts.yml, the Prometheus alerting rules shipped with mlsched: each rule is
whole, and every metric and label its expression or text reads is one GET /metrics gives (a
rule over a renamed metric would never fire, and nobody would know)."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.utils import timezone

from jobs import actions, cycle
from jobs.states import State
from tests.factories import ClusterFactory, JobFactory, NodeFactory, TenantFactory

pytestmark = pytest.mark.django_db

RULES = Path(__file__).resolve().parent.parent / "docs" / "monitoring" / "alerts.yml"
SAMPLE = re.compile(r"^(mlsched_\w+)(?:\{(.*)\})? ")
METRIC = re.compile(r"\bmlsched_\w+")
# Label names read by an expression (`{cluster=...}`, `by (shard)`) or a text (`$labels.x`).
MATCHED = re.compile(r"[{,]\s*(\w+)\s*(?:=~|!~|!=|=)")
GROUPED = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
SAID = re.compile(r"\$labels\.(\w+)")


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"]
            for rule in group["rules"]]  # fmt: skip


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
    one waiting for GPUs, a team with a GPU-hour budget."""
    east = ClusterFactory(name="east", last_heartbeat=timezone.now())
    NodeFactory(cluster=east, gpu_count=8)
    TenantFactory(slug="alpha", gpu_hours_per_month=100)
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


def test_every_metric_and_label_a_rule_reads_is_one_the_platform_exposes(platform_running, scrape):
    given = exposed(scrape())

    for rule in rules():
        expr = rule["expr"]
        metrics = set(METRIC.findall(expr))
        assert metrics <= set(given), (rule["alert"], metrics - set(given))
        read = set(MATCHED.findall(expr)) | set(SAID.findall(str(rule["annotations"])))
        for grouped in GROUPED.findall(expr):
            read |= {name.strip() for name in grouped.split(",") if name.strip()}
        carried = set().union(*(given[name] for name in metrics))
        assert read <= carried, (rule["alert"], read - carried)
