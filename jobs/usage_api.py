"""GET /api/v1/usage/: the usage report (jobs.reports) of the caller's tenants, as JSON.

``?since=YYYY-MM-DD&until=YYYY-MM-DD`` (the last 30 days up to now by default; at most 366
days) and ``?tenant=<slug>`` for one of them. Each row's ``cost`` and ``wasted_cost`` at the
rate card as it stands now (strings, to the cent), in ``currency``; ``unpriced``: the flavors
used that have no rate (jobs/costs.py). A bad parameter is a 400 naming it; another tenant's
slug is refused as an unknown one is, so the answer never confirms it exists. Rate limited as
every user endpoint (the default throttles).
"""

from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import access, reports


class UsageView(APIView):
    def get(self, request):
        try:
            report = reports.requested(request.query_params, access.report_tenants(request.user))
        except reports.BadParameter as bad:
            raise ValidationError({bad.field: bad.message}) from None
        return Response(report.as_json())
