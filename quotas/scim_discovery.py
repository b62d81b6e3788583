"""What SCIM's discovery endpoints say of this service provider (RFC 7644 §4, RFC 7643 §5-7):
PATCH, filters and sorting supported (quotas/scim_query.py), MAX_RESULTS resources a page at
most; no bulk, ETags nor password changes; a bearer token; the User and Group resource types
with the attributes this platform keeps, a user's `groups` among them (read-only)."""

from quotas.scim import GROUP, MAX_RESULTS, USER

CONFIG = "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"
RESOURCE_TYPE = "urn:ietf:params:scim:schemas:core:2.0:ResourceType"
SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Schema"


def service_provider_config(base: str) -> dict:
    return {
        "schemas": [CONFIG],
        "patch": {"supported": True},
        "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": MAX_RESULTS},
        "changePassword": {"supported": False},
        "sort": {"supported": True},
        "etag": {"supported": False},
        "authenticationSchemes": [
            {
                "type": "oauthbearertoken",
                "name": "OAuth Bearer Token",
                "description": "Authorization: Bearer and the token set as MLSCHED_SCIM_TOKEN",
                "primary": True,
            }
        ],
        "meta": {
            "resourceType": "ServiceProviderConfig",
            "location": f"{base}/ServiceProviderConfig",
        },  # fmt: skip
    }


def resource_types(base: str) -> list[dict]:
    return [
        {"schemas": [RESOURCE_TYPE], "id": kind, "name": kind, "endpoint": f"/{kind}s",
         "description": description, "schema": schema,
         "meta": {"resourceType": "ResourceType", "location": f"{base}/ResourceTypes/{kind}"}}
        for kind, schema, description in (("User", USER, "An account"),
                                          ("Group", GROUP, "A group teams follow"))
    ]  # fmt: skip


def attribute(name: str, kind: str = "string", **more) -> dict:
    """An attribute's definition (RFC 7643 §7), the defaults of a single-valued, optional,
    case-insensitive string a client reads and writes; `more` written over them."""
    return {"name": name, "type": kind, "multiValued": False, "description": "",
            "required": False, "caseExact": False, "mutability": "readWrite",
            "returned": "default", "uniqueness": "none", **more}  # fmt: skip


def schemas(base: str) -> list[dict]:
    user = [
        attribute("userName", required=True, uniqueness="server",
                  description="The account's username: letters, digits and @.+-_"),
        attribute("name", "complex", subAttributes=[attribute("givenName"),
                                                    attribute("familyName")]),
        attribute("emails", "complex", multiValued=True,
                  description="One address is kept: the primary one's",
                  subAttributes=[attribute("value"), attribute("type"),
                                 attribute("primary", "boolean")]),
        attribute("active", "boolean", description="False shuts the user out"),
        attribute("externalId", caseExact=True),
        attribute("groups", "complex", multiValued=True, mutability="readOnly",
                  description="The groups the user is in, which a group's members set",
                  subAttributes=[attribute("value", mutability="readOnly",
                                           description="A group's id"),
                                 attribute("$ref", "reference", mutability="readOnly",
                                           referenceTypes=["Group"]),
                                 attribute("display", mutability="readOnly")]),
    ]  # fmt: skip
    member = [
        attribute("value", mutability="immutable", description="A user's id"),
        attribute("display", mutability="readOnly"),
        attribute("$ref", "reference", mutability="immutable", referenceTypes=["User"]),
    ]
    group = [
        attribute("displayName", required=True, uniqueness="server",
                  description="The name teams' groups and MLSCHED_AUTH_ADMIN_GROUPS give"),
        attribute("members", "complex", multiValued=True, subAttributes=member),
        attribute("externalId", caseExact=True),
    ]  # fmt: skip
    return [
        {"schemas": [SCHEMA], "id": schema, "name": name, "description": name,
         "attributes": attributes,
         "meta": {"resourceType": "Schema", "location": f"{base}/Schemas/{schema}"}}
        for schema, name, attributes in ((USER, "User", user), (GROUP, "Group", group))
    ]  # fmt: skip
