"""The commands over a tenant's secrets: secrets, secret-set and secret-delete. A value goes in
from standard input or a file, never from the command line (where the shell's history and the
machine's process list would keep it), and never comes back out."""

import getpass
import sys
from pathlib import Path
from typing import NoReturn
from urllib.parse import quote

from jobs.cli.client import Api, show
from jobs.cli.tables import minute, table

SECRET_HEADER = ["name", "updated (UTC)", "by"]
CREDENTIAL_COLUMNS = ["registry", "user"]  # after the name, once the tenant has a credential


def secrets(api: Api, args) -> None:
    """`secrets TENANT`: its secrets' names, when each was set and by whom, and of its
    registry credentials their registry and user."""
    listed = api.call("GET", f"{secrets_of(args.tenant)}/")["secrets"]
    if not listed:
        show(f"{args.tenant} has no secrets.")
        return
    credentials = any(s["registry"] for s in listed)
    header = SECRET_HEADER[:1] + CREDENTIAL_COLUMNS * credentials + SECRET_HEADER[1:]
    rows = [[s["name"], *([s["registry"] or "-", s["username"] or "-"] * credentials),
             minute(s["updated"]), s["updated_by"] or "-"] for s in listed]  # fmt: skip
    table([header, *rows], names=len(header))


def secret_set(api: Api, args) -> None:
    """`secret-set TENANT NAME [--from-file PATH] [--registry HOST --username USER | --variable]`:
    whether it was created or replaced. The server replaces a secret whole, so set without a
    registry a registry credential would become an environment variable: unless --variable
    says so, that is refused (exit 2) before the value is read, nothing written."""
    credential = bool(args.registry or args.username)
    if credential and args.variable:
        usage_error("--variable sets an environment variable: give it without --registry and "
                    "--username")  # fmt: skip
    was = "" if credential else registry_of(api, args.tenant, args.name)
    if was and not args.variable:
        usage_error(f"{args.name} of {args.tenant} is the registry credential for {was}: set "
                    "it with --registry HOST --username USER, or with --variable to make it "
                    "an environment variable")  # fmt: skip
    body = {"value": value_given(args.from_file, args.name)}
    if credential:
        body |= {"registry": args.registry or "", "username": args.username or ""}
    code, answer = api.answer("PUT", f"{secrets_of(args.tenant)}/{segment(args.name)}/", json=body)
    now = f" (the registry credential for {was} before: now an environment variable)" * bool(was)
    show(f"{'created' if code == 201 else 'replaced'} {answer['name']} of {args.tenant}{now}")


def registry_of(api: Api, tenant: str, name: str) -> str:
    """The registry of the tenant's credential ``name``; "" when it has none of that name (a
    variable, or no secret)."""
    listed = api.call("GET", f"{secrets_of(tenant)}/")["secrets"]
    return next((s["registry"] for s in listed if s["name"] == name and s["registry"]), "")


def usage_error(message: str) -> NoReturn:
    """Exit 2, as for a wrong command line: the command as given is not carried out."""
    show(f"mlsched secret-set: error: {message}", out=sys.stderr)
    raise SystemExit(2)


def secret_delete(api: Api, args) -> None:
    """`secret-delete TENANT NAME`: the server refuses while jobs not yet ended name it (409,
    with their ids), an error as any other."""
    api.call("DELETE", f"{secrets_of(args.tenant)}/{segment(args.name)}/")
    show(f"deleted {args.name} of {args.tenant}")


def value_given(path: str | None, name: str) -> str:
    """The value from the file, or from standard input (asked for without echo at a terminal),
    less one trailing newline: the one `echo` or an editor ends it with."""
    if path is not None:
        try:
            text = Path(path).read_text()
        except (OSError, ValueError) as error:  # ValueError: not text
            raise SystemExit(f"{path}: cannot read a secret's value from it: {error}") from None
    elif sys.stdin.isatty():
        text = getpass.getpass(f"value of {name} (not shown): ")
    else:
        text = sys.stdin.read()
    return text.removesuffix("\n")


def secrets_of(tenant: str) -> str:
    return f"tenants/{segment(tenant)}/secrets"


def segment(text: str) -> str:
    """Text as one segment of the API's path, whatever it holds: `/` and `?` escaped, and `.`
    too, as a `..` segment would be resolved away and reach another address."""
    return quote(text, safe="").replace(".", "%2E")
