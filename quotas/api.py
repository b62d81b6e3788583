"""GET /api/v1/quotas/: the quota status (quotas.status) of the caller's teams, every team for
a platform admin, as the usage report chooses them; ``?tenant=<slug>`` for one (another
team's slug is refused as an unknown one is). Rate limited as every user endpoint."""

from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import access, reports
from quotas import status


class QuotasView(APIView):
    def get(self, request):
        try:
            teams = reports.pick_tenants(
                access.report_tenants(request.user), request.query_params.get("tenant")
            )
        except reports.BadParameter as bad:
            raise ValidationError({bad.field: bad.message}) from None
        answer = status.of(teams, request.user)
        return Response({"tenants": [team.as_json() for team in answer]})
