"""The commands over a tenant's secrets: secrets, secret-set and secret-delete. A value goes in
from standard input or a file, never from the command line (where the shell's history and the
machine's process list would keep it), and never comes back out."""

import getpass
import sys
from pathlib import Path
from typing import NoReturn

from jobs.cli.client import Api, segment, shortened, show
from jobs.cli.tables import minute, table

SECRET_HEADER = ["name", "updated (UTC)", "by"]
KIND_COLUMN = ["kind"]  # after the name, once the tenant gives a secret as a file
CREDENTIAL_COLUMNS = ["registry", "user"]  # after the name and kind, once it has a credential
FLAGS = {"--variable": "sets an environment variable",
         "--as-file": "gives the secret to jobs as a file"}  # fmt: skip
FILE = "given to jobs as a file"
KINDS = {"variable": "an environment variable", "file": "a file",
         "credential": "a registry credential"}  # fmt: skip


def secrets(api: Api, args) -> None:
    """`secrets TENANT`: its secrets' names, when each was set and by whom, and of its
    registry credentials their registry and user. Their kinds (variable, file, credential)
    once it gives one as a file: without, the registry columns tell them apart."""
    listed = api.call("GET", f"{secrets_of(args.tenant)}/")["secrets"]
    if not listed:
        show(f"{args.tenant} has no secrets.")
        return
    files = any(s.get("as_file") for s in listed)
    credentials = any(s["registry"] for s in listed)
    header = [SECRET_HEADER[0], *KIND_COLUMN * files, *CREDENTIAL_COLUMNS * credentials,
              *SECRET_HEADER[1:]]  # fmt: skip
    rows = [[s["name"], *[kind(s)] * files,
             *([s["registry"] or "-", s["username"] or "-"] * credentials),
             minute(s["updated"]), s["updated_by"] or "-"] for s in listed]  # fmt: skip
    table([header, *rows], names=len(header))


def kind(secret: dict | None) -> str:
    """The secret's kind, as the server names them (none: no secret)."""
    if secret is None:
        return "none"
    if secret.get("registry"):
        return "credential"
    return "file" if secret.get("as_file") else "variable"


def secret_set(api: Api, args) -> None:
    """`secret-set TENANT NAME [--from-file PATH] [--registry HOST --username USER | --as-file
    | --variable]`: whether it was created or replaced. The server replaces a secret whole, so
    set without a registry a registry credential would become an environment variable, and
    set without --as-file a file would too: unless --variable says so (or --as-file, for a
    credential), that is refused (exit 2) before the value is read, nothing written. The put
    names the kind read (`replaces`): a secret changed meanwhile is the server's 409, nothing
    written. A server that stored it otherwise than asked (one that gives no secret as a
    file) is an error saying what it stored."""
    credential = bool(args.registry or args.username)
    given = {"--variable": args.variable, "--as-file": args.as_file}
    asked = [flag for flag in FLAGS if given[flag]]
    if credential and asked:
        usage_error(f"{asked[0]} {FLAGS[asked[0]]}: give it without --registry and --username")
    if len(asked) > 1:
        usage_error("--variable sets an environment variable and --as-file a file: give one")
    secret = stored(api, args.tenant, args.name)
    was = "" if credential else described(secret)
    replaced = bool(was) and (was != FILE or not args.as_file)  # its kind, not just its value
    if replaced and not asked:
        usage_error(refusal(args, was))
    body = {"value": value_given(args.from_file, args.name), "replaces": kind(secret)}
    if credential:
        body |= {"registry": args.registry or "", "username": args.username or ""}
    if args.as_file:
        body["as_file"] = True
    code, answer = api.answer("PUT", f"{secrets_of(args.tenant)}/{segment(args.name)}/", json=body)
    wanted = "credential" if credential else "file" if args.as_file else "variable"
    if kind(answer) != wanted:
        raise SystemExit(f"{answer['name']} of {args.tenant} was stored as {KINDS[kind(answer)]}, "
                         f"not as {KINDS[wanted]}: the server does not take that kind")  # fmt: skip
    becomes = FILE if args.as_file else "an environment variable"
    now = f" ({was} before: now {becomes})" * replaced
    show(f"{'created' if code == 201 else 'replaced'} {answer['name']} of {args.tenant}{now}")


def stored(api: Api, tenant: str, name: str) -> dict | None:
    """The tenant's secret ``name`` as the list gives it, None if it has none."""
    listed = api.call("GET", f"{secrets_of(tenant)}/")["secrets"]
    return next((s for s in listed if s["name"] == name), None)


def described(secret: dict | None) -> str:
    """What the secret is when it is not an environment variable: "the registry credential
    for HOST", or FILE; "" for a variable, or no secret."""
    if secret is None:
        return ""
    if secret["registry"]:
        return f"the registry credential for {secret['registry']}"
    return FILE if secret.get("as_file") else ""


def refusal(args, was: str) -> str:
    """Why setting a credential or a file as asked is refused, and how to set it."""
    if was == FILE:
        return (f"{args.name} of {args.tenant} is {FILE}: set it with --as-file, or with "
                "--variable to make it an environment variable")  # fmt: skip
    return (f"{args.name} of {args.tenant} is {was}: set it with --registry HOST --username "
            "USER, or with --variable or --as-file to replace it by an environment variable "
            "or a file")  # fmt: skip


def usage_error(message: str) -> NoReturn:
    """Exit 2, as for a wrong command line: the command as given is not carried out."""
    show(f"mlsched secret-set: error: {shortened(message)}", out=sys.stderr)
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
