"""A small OpenID Connect provider for the tests of the portal's sign-on (quotas/oidc.py): an
HTTP server on 127.0.0.1 serving its discovery document, its keys (JWKS), the authorization
endpoint (which signs in at once the user `claims` describes and sends the browser back with a
code), the token endpoint (the code once, the client's secret or id, PKCE's verifier; a
refresh token of a session it has not ended) and the end-session endpoint; and the
back-channel logout tokens it would post. Its knobs make it misbehave as a broken or hostile
provider would."""

import base64
import hashlib
import json
import secrets
import threading
import time
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote_plus, urlencode, urlsplit

import jwt
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from django.test import Client

KID = "mlsched-test-key"
START = "/accounts/oidc/login/"


@cache
def rsa_key(name: str) -> rsa.RSAPrivateKey:
    """An RSA key made once per test run for each name."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class Provider:
    """The provider, serving while used as a context manager. Knobs: `sign` ("RS256", "other
    key": one it does not publish, "none", "HS256": keyed with the client secret), `token`
    (claims written over the ID token's: a wrong `aud`, `iss`, `nonce`, a past `exp`),
    `token_status` (its token endpoint's answer, 500), `error` (the authorization endpoint's
    refusal, `access_denied`), `algorithms` (those its discovery lists), `logout_url`
    (its end_session_endpoint; None: it has none), `gives_refresh` (a refresh token with the
    ID token), `refresh_status` (its answer to a refresh, 503), `refreshed` (claims written
    over a refreshed ID token's). Each sign-in is a session of its own there (`sid`)."""

    def __init__(self, client_id: str = "mlsched-portal", client_secret: str = "s" * 40):
        self.client_id, self.client_secret = client_id, client_secret
        self.claims: dict = {"sub": "u-1", "preferred_username": "alice",
                             "email": "alice@corp.example.com", "email_verified": True}  # fmt: skip
        self.sign, self.token, self.token_status, self.error = "RS256", {}, 200, ""
        self.algorithms, self.kid = ["RS256"], KID
        self.codes: dict[str, dict] = {}
        self.gives_refresh, self.refresh_status, self.refreshed = True, 200, {}
        self.sessions: dict[str, str] = {}  # a live refresh token: the sid it is of
        self.refreshes = 0  # refreshes answered
        self.logged_out: list[dict[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"
        self.logout_url: str | None = f"{self.issuer}/logout"

    def __enter__(self):
        serving = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        serving.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def rotate(self) -> None:
        """Sign with a new key, published under a new id."""
        self.kid = f"{KID}-{secrets.token_hex(4)}"

    def key(self) -> rsa.RSAPrivateKey:
        return rsa_key(self.kid)

    def discovery(self) -> dict:
        document = {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": self.algorithms,
            "code_challenge_methods_supported": ["S256"],
        }
        return document | ({"end_session_endpoint": self.logout_url} if self.logout_url else {})

    def jwks(self) -> dict:
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key().public_key(), as_dict=True)
        return {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str]]:
        """The authorization endpoint's answer: a redirect back with a code, or a 400."""
        wanted = {"client_id": self.client_id, "response_type": "code",
                  "code_challenge_method": "S256"}  # fmt: skip
        if any(query.get(name) != value for name, value in wanted.items()):
            return 400, {}
        if "openid" not in query.get("scope", "").split() or not query.get("code_challenge"):
            return 400, {}
        back = {"state": query.get("state", "")}
        if self.error:
            back |= {"error": self.error, "error_description": "The user said no."}
        else:
            code = secrets.token_urlsafe(16)
            self.codes[code] = {"query": query, "claims": dict(self.claims)}
            back["code"] = code
        return 302, {"Location": f"{query['redirect_uri']}?{urlencode(back)}"}

    def exchange(self, form: dict[str, str], authorization: str) -> tuple[int, dict]:
        """The token endpoint's answer to a code's exchange."""
        if self.token_status != 200:
            return self.token_status, {"error": "server_error"}
        asked = self.codes.pop(form.get("code", ""), None)
        if form.get("grant_type") != "authorization_code" or asked is None:
            return 400, {"error": "invalid_grant"}
        query = asked["query"]
        verifier = form.get("code_verifier", "").encode("ascii")
        if (
            form.get("redirect_uri") != query["redirect_uri"]
            or b64(hashlib.sha256(verifier).digest()) != query["code_challenge"]
        ):
            return 400, {"error": "invalid_grant"}
        if not self.client_authenticated(form, authorization):
            return 401, {"error": "invalid_client"}
        sid = secrets.token_hex(8)
        claims = {**asked["claims"], "sid": sid}
        return 200, self.tokens(self.id_token(claims, query.get("nonce")), sid)

    def tokens(self, id_token: str | None, sid: str) -> dict:
        """A token endpoint's answer, with a new refresh token of session `sid` (given)."""
        answer = {"access_token": secrets.token_urlsafe(16), "token_type": "Bearer",
                  "expires_in": 300}  # fmt: skip
        if id_token:
            answer["id_token"] = id_token
        if self.gives_refresh:
            answer["refresh_token"] = refresh_token = secrets.token_urlsafe(24)
            self.sessions[refresh_token] = sid
        return answer

    def refresh(self, form: dict[str, str], authorization: str) -> tuple[int, dict]:
        """The token endpoint's answer to a refresh: a new ID token of the user as `claims`
        say now (and `refreshed`), no nonce, the refresh token rotated."""
        if self.refresh_status != 200:
            return self.refresh_status, {"error": "temporarily_unavailable"}
        if not self.client_authenticated(form, authorization):
            return 401, {"error": "invalid_client"}
        sid = self.sessions.pop(form.get("refresh_token", ""), None)
        if sid is None:
            return 400, {"error": "invalid_grant", "error_description": "Session not active"}
        self.refreshes += 1
        return 200, self.tokens(self.id_token({**self.claims, "sid": sid, **self.refreshed}), sid)

    def end_sessions(self) -> None:
        """Sign the user out here: their refresh tokens are refused from now on."""
        self.sessions.clear()

    def logout_token(self, **claims) -> str:
        """A back-channel logout token, its claims written over with `claims` (a value None
        leaves that claim out)."""
        now = int(time.time())
        payload = {"iss": self.issuer, "aud": self.client_id, "iat": now, "exp": now + 120,
                   "jti": secrets.token_hex(8), "sub": self.claims["sub"],
                   "events": {"http://schemas.openid.net/event/backchannel-logout": {}},
                   **claims}  # fmt: skip
        payload = {name: value for name, value in payload.items() if value is not None}
        return self.signed(payload)

    def client_authenticated(self, form: dict[str, str], authorization: str) -> bool:
        """HTTP Basic with the secret (form-encoded id and secret) for a confidential client,
        the client id in the body for a public one."""
        if not self.client_secret:
            return form.get("client_id") == self.client_id
        if not authorization.startswith("Basic "):
            return False
        written = base64.b64decode(authorization.removeprefix("Basic ")).decode()
        client_id, _, secret = written.partition(":")
        return (unquote_plus(client_id), unquote_plus(secret)) == (
            self.client_id,
            self.client_secret,
        )

    def id_token(self, claims: dict, nonce: str | None = None) -> str:
        now = int(time.time())
        payload = {"iss": self.issuer, "aud": self.client_id, "iat": now, "exp": now + 300,
                   **({"nonce": nonce} if nonce else {}), **claims, **self.token}  # fmt: skip
        return self.signed(payload)

    def signed(self, payload: dict) -> str:
        """`payload` signed as `sign` says."""
        if self.sign == "none":
            header = {"alg": "none", "typ": "JWT"}
            return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}."
        if self.sign == "HS256":
            return jwt.encode(payload, self.client_secret, "HS256", headers={"kid": self.kid})
        key = rsa_key("other") if self.sign == "other key" else self.key()
        return jwt.encode(payload, key, "RS256", headers={"kid": self.kid})

    def handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                parts = urlsplit(self.path)
                query = {name: values[0] for name, values in parse_qs(parts.query).items()}
                if parts.path == "/.well-known/openid-configuration":
                    self.answer(200, provider.discovery())
                elif parts.path == "/jwks":
                    self.answer(200, provider.jwks())
                elif parts.path == "/authorize":
                    status, headers = provider.authorize(query)
                    self.answer(status, {}, headers)
                elif parts.path == "/logout":
                    provider.logged_out.append(query)
                    back = query.get("post_logout_redirect_uri")
                    self.answer(302 if back else 200, {}, {"Location": back} if back else {})
                else:
                    self.answer(404, {})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = parse_qs(self.rfile.read(length).decode())
                form = {name: values[0] for name, values in body.items()}
                if urlsplit(self.path).path != "/token":
                    return self.answer(404, {})
                grant = provider.refresh if form.get("grant_type") == "refresh_token" else None
                status, answer = (grant or provider.exchange)(
                    form, self.headers.get("Authorization", "")
                )
                self.answer(status, answer)

            def answer(self, status: int, document: dict, headers: dict | None = None):
                body = json.dumps(document).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):
                pass

        return Handler


def to_provider(browser: Client, next: str | None = None) -> str:
    """Start a login in `browser` and let the provider answer: the callback's address it sends
    the browser back to."""
    started = browser.get(START, {"next": next} if next is not None else {})
    assert started.status_code == 302, started.content
    back = requests.get(started["Location"], allow_redirects=False, timeout=10)
    assert back.status_code == 302, back.text
    return back.headers["Location"]


def sign_on(browser: Client, next: str | None = None):
    """A whole login through the provider: the callback's answer."""
    return browser.get(to_provider(browser, next))


def who(browser: Client) -> str | None:
    """Whom the API takes the browser for (None: nobody)."""
    answer = browser.get("/api/v1/me/")
    return answer.json()["username"] if answer.status_code == 200 else None
