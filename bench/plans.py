"""Query plans of the requests a benchmark times: which of the jobs table's indexes a statement
used, its time in the database and the pages it read (EXPLAIN (ANALYZE, BUFFERS)), and a run's
rounds pooled into one median per row."""

import json
import statistics


def explain(sql: str, params) -> dict:
    """What a statement did: the indexes it used, its time in the database, the pages read."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = plan[0] if isinstance(plan, list) else json.loads(plan)[0]
    indexes, scans = set(), []

    def walk(node):  # the jobs table's indexes are named job_* and jobs_job_*
        if node.get("Index Name", "").startswith("job"):
            indexes.add(node["Index Name"])
        if node["Node Type"] == "Seq Scan" and node["Relation Name"] == "jobs_job":
            scans.append(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    top = plan["Plan"]
    return {
        "indexes": sorted(indexes),
        "seq_scans": scans,
        "ms": plan["Execution Time"],
        "pages": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
        "rows": top["Actual Rows"],
    }


def pooled(rounds: list[dict]) -> dict[str, dict]:
    """Each row's median over every round's requests, and the last round's plans."""
    return {
        name: {
            "ms": statistics.median(t for run in rounds for t in run[name]["times"]),
            "statements": rounds[-1][name]["statements"],
        }
        for name in rounds[0]
    }


def plans(result: dict) -> str:
    """Each statement explained as `indexes (db ms, pages)`."""
    parts = []
    for s in result["statements"]:
        used = ", ".join(s["indexes"]) or "-"
        if s["seq_scans"]:
            used += " + seq scan " + ", ".join(s["seq_scans"])
        parts.append(f"{used} ({s['ms']:.1f} ms, {s['pages']:,} pages)")
    return "; ".join(parts)


def without_and_with(rounds: int, measure, index: str, create_index):
    """`rounds` rounds of `measure()` without `index`, then with it (`create_index()` builds it
    and gives its build's seconds; it is dropped before every round but the first, which starts
    without it): the two columns from one run on one database, interleaved so that the
    machine's other load weighs on both alike. (pooled without, pooled with, build seconds)."""
    without, with_index, builds = [], [], []
    for n in range(rounds):
        if n:
            drop_index(index)
        without.append(measure())
        builds.append(create_index())
        with_index.append(measure())
    return pooled(without), pooled(with_index), builds


def drop_index(index: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {index}")


def index_size(index: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_relation_size(%s::regclass))", [index])
        return cursor.fetchone()[0]


def tables(row: str, before: dict, after: dict, plans_said: str) -> list[str]:
    """The markdown of a run: each row's median without and with the index and their ratio,
    then, after `plans_said`, its statements' plans in both."""
    lines = ["", f"| {row} | without ms | with ms | ratio |", "|---|---:|---:|---:|"]
    for name, now in after.items():
        was = before[name]
        lines.append(f"| {name} | {was['ms']:,.1f} | {now['ms']:,.1f} | "
                     f"{was['ms'] / now['ms']:.1f}x |")  # fmt: skip
    lines += ["", plans_said, "", f"| {row} | without | with |", "|---|---|---|"]
    lines += [f"| {name} | {plans(before[name])} | {plans(now)} |" for name, now in after.items()]
    return lines
