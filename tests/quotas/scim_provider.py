"""What the SCIM tests send as Okta and Microsoft Entra ID send it: a client holding the
platform's SCIM token, and the bodies those providers write."""

import json

from django.test import Client

TOKEN = "scim-" + "9f2c4e7a1b8d3f6e0a5c2b7d4e1f8a3c"  # MLSCHED_SCIM_TOKEN in these tests
SCIM = "/scim/v2"
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


class ScimClient:
    """The identity provider: each call under /scim/v2 with its bearer token, bodies as JSON
    (`application/scim+json`, as Okta and Entra ID send them)."""

    def __init__(self, token: str = TOKEN):
        self.client = Client(raise_request_exception=False)
        self.headers = {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, body=None, **query):
        data = body if isinstance(body, str | bytes) else json.dumps(body) if body else None
        send = getattr(self.client, method)
        if method in ("get", "delete") and data is None:
            return send(SCIM + path, query, headers=self.headers)
        return send(SCIM + path, data, content_type="application/scim+json", headers=self.headers)

    def get(self, path: str, **query):
        return self.call("get", path, **query)

    def post(self, path: str, body):
        return self.call("post", path, body)

    def put(self, path: str, body):
        return self.call("put", path, body)

    def patch(self, path: str, *operations, body=None):
        return self.call("patch", path, body if body is not None else patch_op(*operations))

    def delete(self, path: str):
        return self.call("delete", path)

    def user(self, username: str = "dana@corp.example.com", **more) -> dict:
        """A user made as Okta makes one: the resource it answers."""
        made = self.post("/Users", okta_user(username, **more))
        assert made.status_code == 201, made.content
        return made.json()

    def group(self, name: str, *members: dict) -> dict:
        """A group pushed as Entra ID pushes one, with these users (resources) as members."""
        body = {"schemas": [GROUP], "displayName": name, "externalId": f"ext-{name}",
                "members": [{"value": member["id"]} for member in members]}  # fmt: skip
        made = self.post("/Groups", body)
        assert made.status_code == 201, made.content
        return made.json()


def okta_user(username: str, **more) -> dict:
    """The body Okta's POST /Users sends."""
    given, _, family = username.partition("@")[0].partition(".")
    email = username if "@" in username else f"{username}@corp.example.com"
    return {
        "schemas": [USER],
        "userName": username,
        "name": {"givenName": given.title(), "familyName": family.title() or "Doe"},
        "emails": [{"primary": True, "value": email, "type": "work"}],
        "displayName": f"{given.title()} {family.title()}",
        "locale": "en-US",
        "externalId": f"00u-{given}",
        "groups": [],
        "password": "never-kept-1",
        "active": True,
        **more,
    }


def patch_op(*operations: dict) -> dict:
    return {"schemas": [PATCH_OP], "Operations": list(operations)}


def members(*users: dict) -> list[dict]:
    return [{"value": user["id"]} for user in users]
