"""GET /api/v1/usage/: the usage report (jobs.reports) of the caller's tenants, as JSON.

``?since=YYYY-MM-DD&until=YYYY-MM-DD`` (the last 30 days up to now by default; at most 366
days) and ``?tenant=<slug>`` for one of them. Each row's ``cost`` and ``wasted_cost`` at the
rates in force on the days its hours were used (strings, to the cent), in ``currency``;
``unpriced``: the flavors used where no rate was in force (jobs/costs.py). A bad parameter is
a 400 naming it; another tenant's slug is refused as an unknown one is, so the answer never
confirms it exists. Rate limited as every user endpoint (the default throttles).

GET /api/v1/usage/daily/: the same figures per UTC day (jobs.daily_usage), GPU-hours and CPU
core-hours by tenant and GPU type, for the same parameters, checked and refused alike.
"""

from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import access, daily_usage, reports


class UsageView(APIView):
    def get(self, request):
        try:
            report = reports.requested(request.query_params, access.report_tenants(request.user))
        except reports.BadParameter as bad:
            raise ValidationError({bad.field: bad.message}) from None
        return Response(report.as_json())


class DailyUsageView(APIView):
    def get(self, request):
        tenants = access.report_tenants(request.user)
        try:
            series = daily_usage.requested(request.query_params, tenants)
        except reports.BadParameter as bad:
            raise ValidationError({bad.field: bad.message}) from None
        return Response(series.as_json())
