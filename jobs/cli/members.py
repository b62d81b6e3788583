"""The commands on a team's members: `members`, `member-add`, `member-set` and
`member-remove`, as the portal's Teams page does them (owners change them; every member
reads them)."""

from jobs.cli.client import Api, segment, show
from jobs.cli.tables import table

MEMBER_HEADER = ["member", "role", "given by"]


def members_of(tenant: str, username: str = "") -> str:
    path = f"tenants/{segment(tenant)}/members/"
    return f"{path}{segment(username)}/" if username else path


def members(api: Api, args) -> None:
    """`members TENANT`: its members by name, each one's role and what gives it (a sign-on
    group, or by hand)."""
    listed = api.call("GET", members_of(args.tenant))["members"]
    rows = [[m["username"], m["role"], f"group {m['from_group']}" if m["from_group"] else "hand"]
            for m in listed]  # fmt: skip
    table([MEMBER_HEADER, *rows], names=len(MEMBER_HEADER))


def member_add(api: Api, args) -> None:
    """`member-add TENANT USER [--role ROLE]` (a team's owners): the user added."""
    made = api.call("POST", members_of(args.tenant), json={"username": args.user,
                                                          "role": args.role})  # fmt: skip
    show(f"{made['username']} added to {args.tenant} as {made['role']}")


def member_set(api: Api, args) -> None:
    """`member-set TENANT USER ROLE` (a team's owners): the member's role now."""
    kept = api.call("PATCH", members_of(args.tenant, args.user), json={"role": args.role})
    show(f"{kept['username']} is {kept['role']} of {args.tenant}")


def member_remove(api: Api, args) -> None:
    """`member-remove TENANT USER` (a team's owners)."""
    api.call("DELETE", members_of(args.tenant, args.user))
    show(f"{args.user} removed from {args.tenant}")
