"""The command line's side of `mlsched login` (quotas.cli_logins), called before it holds any
token, so without authentication:

POST /api/v1/cli-logins/ `{"name": "mlsched CLI on laptop"}` (optional: the token's name) starts
a login: 201 with its `device_code`, `user_code`, `verification_uri` (the portal's page where
the user types the code), `verification_uri_complete` (the same, the code filled in),
`expires_in` and `interval` (seconds), as RFC 8628 section 3.2 names them; 400 naming `name`.
At most START_RATE from one client address, and the users' API rate (429).

POST /api/v1/cli-logins/token/ `{"device_code"}`: 200 with the API token's `token` (its key,
in this answer alone), `username` and `expires` once the login is approved, a single time; 400
`{"error": ...}` otherwise: authorization_pending, slow_down (polled sooner than its interval,
now 5 s longer), access_denied, expired_token (after its life, once spent, or for an unknown
code), as RFC 8628 section 3.5 answers."""

from django.urls import reverse
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.throttles import UserRate
from quotas import accounts, cli_logins, tokens
from quotas.logins import client_address

START_RATE = "10/minute"


class StartRate(UserRate):
    """Logins started from one client address: START_RATE."""

    scope = "cli-login-start"

    def get_rate(self) -> str:
        return START_RATE

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}


def unstored(response: Response) -> Response:
    # It holds a secret (a device code, a token's key): no browser or proxy keeps it.
    response["Cache-Control"] = "no-store"
    return response


class CliLoginsView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [UserRate, StartRate]

    def post(self, request):
        data = request.data if isinstance(request.data, dict) else {}
        name = data.get("name", cli_logins.DEFAULT_NAME)
        if not isinstance(name, str):
            raise ValidationError({"name": ["The token's name, as text."]})
        try:
            started = cli_logins.start(name, client_address(request))
        except tokens.TokenError as error:
            raise ValidationError({error.field: [error.message]}) from None
        page = accounts.absolute(request, reverse("cli_login"))
        return unstored(Response({
            "device_code": started.device_code,
            "user_code": started.user_code,
            "verification_uri": page,
            "verification_uri_complete": f"{page}?code={started.user_code}",
            "expires_in": int(cli_logins.LIFE.total_seconds()),
            "interval": started.login.interval_s,
        }, status=201))  # fmt: skip


class CliLoginTokenView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    def post(self, request):
        data = request.data if isinstance(request.data, dict) else {}
        device_code = data.get("device_code")
        if not isinstance(device_code, str) or not device_code:
            return Response({"error": "invalid_request"}, status=400)
        try:
            token, key = cli_logins.poll(device_code)
        except cli_logins.Refused as refused:
            answer = {"error": refused.error, "error_description": refused.description}
            return unstored(Response(answer, status=400))
        return unstored(Response({"token": key, "username": token.user.get_username(),
                                  "expires": token.expires}))  # fmt: skip
