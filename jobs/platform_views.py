"""The portal's pages about the platform rather than one job: the overview of the metrics,
the clusters and their nodes, the usage report and its CSV, and the Prometheus scrape."""

import csv
import json
import secrets
from datetime import UTC
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import content_disposition_header

from clusters.models import MaintenanceWindow, Node
from jobs import access, daily_usage, listing, nodes_api, reports
from jobs import metrics as platform_metrics
from jobs.access import visible_jobs
from jobs.forms import described
from jobs.maintenance_api import bookings_of, nodes_named, planned
from jobs.overview import panels
from jobs.states import TERMINAL, State
from jobs.views import labels_written


@login_required
def overview(request):
    """The metrics, drawn: the clusters, their maintenance to come and the scheduler as
    everyone sees them; the bookings, job and attempt figures of the user's own tenants only.
    First the panels read off them (jobs.overview), then every metric in full."""
    tenants = access.tenants_of(request.user)
    figures = platform_metrics.collect(timezone.now(), tenants)
    context = {
        **panels(figures),
        "metrics": figures,
        "maintenance": with_nodes_named(planned(MaintenanceWindow.objects)),
        "bookings": with_nodes_named(bookings_of(tenants)),
    }
    return render(request, "portal/overview.html", context)


def with_nodes_named(windows) -> list:
    """Each window with its nodes written for the page."""
    return [(window, nodes_named(window)) for window in windows]


@login_required
def clusters(request):
    """The clusters and their nodes, as GET /api/v1/clusters/ and /api/v1/nodes/ give them
    (Slurm's sinfo); the nodes narrowed by the form's cluster, state and GPU type, an unknown
    cluster or state a 400 with the form's error."""
    values = {name: request.GET.get(name, "") for name in ("cluster", "state", "gpu_type")}
    errors, shown = {}, []
    # Every node listed once, for the clusters' figures; the table keeps those asked for.
    rows = nodes_api.listed(Node.objects.all(), request.user)
    try:
        nodes, state = nodes_api.asked(request.GET)
        wanted = set(nodes.values_list("pk", flat=True))
        shown = [row for row in nodes_api.in_state(rows, state) if row.node.pk in wanted]
    except reports.BadParameter as bad:
        errors = {bad.field: bad.message}
    clusters = nodes_api.clusters_json(rows)
    context = {
        "clusters": clusters,
        # The node filter's choices: every cluster and GPU type, and one asked for that is
        # neither (a link typed by hand), so the form shows what was asked.
        "cluster_names": choices([c["name"] for c in clusters], values["cluster"]),
        "gpu_types": choices(
            [g["gpu_type"] for c in clusters for g in c["gpus"]], values["gpu_type"]
        ),  # fmt: skip
        "nodes": shown,
        "states": nodes_api.STATES,
        "no_gpus": [None],
        "values": values,
        "fields": described(errors),
    }
    return render(request, "portal/clusters.html", context, status=400 if errors else 200)


def choices(known: list[str], asked: str) -> list[str]:
    """A filter's options, sorted and each once, with the value asked for among them."""
    return sorted({*known, *([asked] if asked else [])})


@login_required
def usage(request):
    """The usage report of the user's tenants (every tenant for a platform admin) over a
    window, as a table; a bad date or team is a 400 with the form's error."""
    values = {name: request.GET.get(name, "")
              for name in ("since", "until", "tenant", "by_label",
                           *(f"by_{split}" for split in reports.SPLITS))}  # fmt: skip
    tenants = access.report_tenants(request.user)
    report, errors = None, {}
    try:
        report = reports.requested(request.GET, tenants)
    except reports.BadParameter as bad:
        errors = {bad.field: bad.message}
    context = {
        "report": report,
        "values": values,
        "errors": errors,
        "fields": described(errors),
        "tenants": tenants.order_by("name"),
        **drawn_tables(report),
        "csv_query": urlencode({name: value for name, value in values.items() if value}),
        # GPU-hours per day over the same window, drawn, and its CSV's parameters.
        "daily": daily_chart(tenants, values["tenant"], report) if report else None,
        "daily_query": urlencode(
            {name: values[name] for name in ("since", "until", "tenant") if values[name]}
        ),
    }
    return render(request, "portal/usage.html", context, status=400 if errors else 200)


# The usage page's two cost columns (Cost, Wasted cost: the currency written into each), at the
# same place in each of its tables, beside the hours.
COSTS = slice(reports.HEADINGS.index("Cost"), reports.HEADINGS.index("Wasted cost") + 1)


def drawn_tables(report: reports.Report | None) -> dict:
    """The usage page's tables as drawn: their headings (a split's after its team and value),
    the report's rows, its split by label's and the splits of SPLITS (each: name, column, rows,
    CSV's address, whether asked). Where no price is set at all the cost columns are left out
    (the page says so once): a column of 0.00 would tell nothing. The CSVs keep theirs."""
    priced = bool(report and report.priced)

    def drawn(rows: list[list[str]]) -> list[list[str]]:
        return rows if priced else [row[: COSTS.start] + row[COSTS.stop :] for row in rows]

    return {
        "headings": drawn([reports.HEADINGS])[0],
        "split_headings": drawn([reports.HEADINGS[: COSTS.stop]])[0][2:],
        "rows": drawn(report.shown_rows()) if report else [],
        "label_rows": drawn(report.label_rows()) if report and report.label else [],
        "splits": [
            (
                name,
                heading,
                drawn(report.split_rows(name)) if report else [],
                reverse("usage_split_csv", args=[name]),
                bool(report) and name in report.splits,
            )
            for name, (_, heading) in reports.SPLITS.items()
        ],  # fmt: skip
    }


def daily_chart(tenants, slug: str, report: reports.Report) -> dict:
    """The usage page's chart of GPU-hours per day (jobs.daily_usage.drawn), over the report's
    window, up to its now, for the tenants it shows."""
    shown = reports.pick_tenants(tenants, slug)
    return daily_usage.drawn(daily_usage.daily(shown, report.since, report.until, report.now))


@login_required
def usage_csv(request):
    """The usage page's table as a CSV file, for the same parameters."""
    return report_csv(request, "usage", reports.COLUMNS, reports.Report.rows,
                      lambda report: report.incomplete)  # fmt: skip


@login_required
def usage_daily_csv(request):
    """The usage page's GPU-hours and CPU core-hours per day (jobs.daily_usage) as a CSV file,
    for the same parameters: per day and tenant a row of GPU type "all", then one for each GPU
    type it used."""
    return report_csv(request, "usage-daily", daily_usage.COLUMNS, daily_usage.DailyUsage.rows,
                      lambda series: series.incomplete, read=daily_usage.requested)  # fmt: skip


@login_required
def usage_by_label_csv(request):
    """The usage page's split by a label (``?by_label=``, needed) as a CSV file: chargeback by
    project. A row per tenant and value of the label, ``labelled`` false for the jobs without
    it (their value empty), and how complete the window is: the split is read from the jobs
    (`Report.split_incomplete`)."""
    if not request.GET.get("by_label"):
        return HttpResponse("by_label: Name the label to split by.\n", status=400,
                            content_type="text/plain")  # fmt: skip
    split = reports.Report.label_split
    return report_csv(request, "usage-by-label", reports.LABEL_COLUMNS, split,
                      lambda report: report.split_incomplete)  # fmt: skip


@login_required
def usage_split_csv(request, split: str):
    """The usage page's split by the users who submitted the jobs (Slurm's sreport user top),
    or by their priority classes, as a CSV file: a row per tenant and value, every figure, and
    how complete the window is (read from the jobs, as the split by label is)."""
    if split not in reports.SPLITS:
        raise Http404(f"No split by {split}.")
    return report_csv(request, f"usage-by-{split}", reports.split_columns(split),
                      lambda report: report.split_cells(split),
                      lambda report: report.split_incomplete)  # fmt: skip


def report_csv(
    request, name: str, columns: list[str], rows, incomplete, read=reports.requested
) -> HttpResponse:
    """A usage report's ``rows(report)`` as a CSV file under ``columns``, each row ending with
    the window it covers and whether that is ``incomplete(report)``; the report ``read`` from
    the request's parameters (400 naming one wrong)."""
    try:
        report = read(request.GET, access.report_tenants(request.user))
    except reports.BadParameter as bad:
        return HttpResponse(f"{bad.field}: {bad.message}\n", status=400, content_type="text/plain")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    name = f"{name}-{report.since:%Y-%m-%d}-{report.until:%Y-%m-%d}.csv"
    response["Content-Disposition"] = content_disposition_header(True, name)
    writer = csv.writer(response)
    writer.writerow(csv_header(columns))
    # Each row says what it covers: a window without `until` ends at the download's now, not
    # the page's, and a part retention has deleted is not counted.
    window = [f"{report.since:%Y-%m-%dT%H:%M:%SZ}", f"{report.until:%Y-%m-%dT%H:%M:%SZ}",
              "true" if incomplete(report) else "false"]  # fmt: skip
    for row in rows(report):
        writer.writerow(written(columns, [spreadsheet_safe(cell) for cell in row], window))
    return response


def written(columns: list[str], cells: list[str], window: list[str]) -> list[str]:
    """A report's row (or its header) as its CSV writes it: the cells, the window, then the
    costs (reports.COST_COLUMNS), last, so the columns before them keep the places they had
    before there were costs, for the scripts that read a column by its place."""
    costs = [i for i, column in enumerate(columns) if column in reports.COST_COLUMNS]
    others = [i for i in range(len(columns)) if i not in costs]
    return [*(cells[i] for i in others), *window, *(cells[i] for i in costs)]


def csv_header(columns: list[str]) -> list[str]:
    """The header of a report's CSV of `columns`."""
    return written(columns, columns, WINDOW_COLUMNS)


WINDOW_COLUMNS = ["since", "until", "incomplete"]

# The job list as a CSV file (Slurm's sacct --parsable): a row per job, shards included.
JOB_COLUMNS = ["id", "name", "tenant", "owner", "family", "state", "held", "priority_class",
               "workers", "gpus", "gpu_milli", "cpu_milli", "memory_mb", "topology",
               "exclusive", "batch", "shard",
               "labels", "created", "started_at", "finished_at", "why"]  # fmt: skip
MAX_JOB_ROWS = 100_000  # a download's rows at most, newest first


@login_required
def jobs_csv(request):
    """The jobs the job list's filters match (jobs/listing.py, as the page and the API read
    them: state, held, tenant, q, mine, label, since, until, node, batch, id), every shard
    its own row, newest first, at most MAX_JOB_ROWS, as a CSV file streamed as it is read;
    what is wrong with the filters is a 400 naming each."""
    asked = listing.asked(request.GET, request.user, labels_written(request))
    if asked.errors:
        said = "".join(f"{field}: {message}\n" for field, message in asked.errors.items())
        return HttpResponse(said, status=400, content_type="text/plain")
    jobs = visible_jobs(request.user).select_related("tenant", "owner", "priority_class")
    jobs = asked.of(jobs.with_end_reason(), request.user, fold=False).order_by("-id")
    mine = access.tenant_ids(request.user)

    def lines():
        out = Echo()
        writer = csv.writer(out)
        yield writer.writerow(JOB_COLUMNS)
        for job in jobs[:MAX_JOB_ROWS].iterator(chunk_size=2000):
            yield writer.writerow([spreadsheet_safe(str(cell)) for cell in job_cells(job, mine)])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    name = f"jobs-{timezone.now():%Y-%m-%dT%H%M%SZ}.csv"
    response["Content-Disposition"] = content_disposition_header(True, name)
    return response


class Echo:
    """A file that gives back what is written to it: csv.writer's rows, one at a time."""

    def write(self, value: str) -> str:
        return value


def job_cells(job, mine) -> list:
    """A job's row of JOB_COLUMNS: why it waits (queued) or ended (as the list says it)."""
    if job.state in TERMINAL:
        why = access.end_reason(job, mine)
    else:
        why = job.pending_message if job.state == State.QUEUED else ""
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    return [
        job.pk, job.name, job.tenant.slug, job.owner.get_username(), job.family, job.state,
        job.held, job.priority_class.name, job.workers, job.gpus, job.gpu_milli, job.cpu_milli,
        job.memory_mb, job.topology, "true" if job.exclusive else "false",
        job.parent_id or (job.pk if job.is_batch else ""),
        "" if job.shards == 1 else job.shard_index,
        json.dumps(job.labels, sort_keys=True) if job.labels else "",
        *(f"{moment.astimezone(UTC):{stamp}}" if moment else ""
          for moment in (job.created, job.started_at, job.finished_at)),
        why,
    ]  # fmt: skip


def spreadsheet_safe(cell: str) -> str:
    """A cell a spreadsheet will not run as a formula: a GPU type is whatever an agent
    reported, and "=HYPERLINK(...)" would be one. Figures never start with these."""
    return f"'{cell}" if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


def metrics(request):
    """Prometheus scrape: `Authorization: Bearer $MLSCHED_METRICS_TOKEN`, or a platform
    admin's (superuser's) session.

    The numbers name clusters, GPU types and every tenant, so they are not for tenant admins.
    """
    token = settings.MLSCHED_METRICS_TOKEN
    bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
    allowed = request.user.is_superuser or (
        token and secrets.compare_digest(bearer.encode(), token.encode())
    )
    if not allowed:
        return HttpResponse("metrics need a platform admin or the metrics token\n", status=403)
    return HttpResponse(platform_metrics.render(), content_type="text/plain; version=0.0.4")
