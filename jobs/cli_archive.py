"""The command line as one file to download (`GET /cli/mlsched.pyz`): a Python zip application
(PEP 441) of `jobs/cli` and the modules it imports, with the pure-Python libraries it uses
(requests and those requests uses, PyYAML) and their licenses, so that a user's laptop needs
Python 3.11 or newer and nothing else: no checkout of the server's code, no pip.

The archive names the server it came from (`jobs/cli/server.txt`, `cli.client.SERVER_FILE`):
`MLSCHED_PUBLIC_URL`, else the address it was downloaded at, which the CLI talks to when
`MLSCHED_URL` is unset. The libraries' compiled speed-ups (charset_normalizer's, PyYAML's)
are left out: each falls back on its own pure-Python code. Built once per server address in a
process, byte for byte the same every time (entries sorted, fixed timestamps), so its ETag
holds across the web processes of one release.

It names its release too (`jobs/cli/release.txt`, `cli.client.RELEASE_FILE`), a digest of all
it holds but its server, and every answer of the API names the server's
(`mlsched_site.middleware.release_header`): a copy of another release says so to its user,
with no request of its own.
"""

import functools
import hashlib
import io
import zipfile
from importlib import metadata, util
from pathlib import Path

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import condition, require_safe

from jobs.cli.client import RELEASE_FILE, SERVER_FILE

ROOT = Path(__file__).resolve().parent.parent
# The project's modules the CLI imports (tests/jobs/test_cli_download.py runs the archive
# without site-packages: a module missing here fails it).
OWN = ["jobs/__init__.py", "jobs/cli", "jobs/efficiency.py", "jobs/placement"]
# The libraries, by the package imported and the distribution it comes in (for its licenses).
LIBRARIES = {"requests": "requests", "urllib3": "urllib3", "idna": "idna",
             "charset_normalizer": "charset-normalizer", "certifi": "certifi",
             "yaml": "PyYAML"}  # fmt: skip
MAIN = b"import sys\n\nfrom jobs.cli.main import main\n\nsys.exit(main())\n"
SHEBANG = b"#!/usr/bin/env python3\n"
COMPILED = {".so", ".pyd", ".pyc"}
WHEN = (1980, 1, 1, 0, 0, 0)  # the earliest a zip records: the same bytes at every build


@require_safe
@condition(etag_func=lambda request: etag(server_of(request)))
def download(request):
    """The archive, to anyone (as the API's description is: the CLI is no secret, and a user
    fetches it before signing in); a browser or curl keeps it as `mlsched.pyz`."""
    answer = HttpResponse(archive(server_of(request)), content_type="application/zip")
    answer["Content-Disposition"] = 'attachment; filename="mlsched.pyz"'
    if not settings.MLSCHED_PUBLIC_URL:  # it names the address asked: kept per address
        answer["Vary"] = "Host"
        answer["Cache-Control"] = "private"
    return answer


def server_of(request) -> str:
    """The address the downloaded CLI talks to: the platform's public one, else the one asked."""
    return (settings.MLSCHED_PUBLIC_URL or request.build_absolute_uri("/")).rstrip("/")


@functools.lru_cache(maxsize=4)  # a few addresses at most (the Host header is checked)
def archive(server: str) -> bytes:
    """The zip application, naming `server`."""
    named = [(f"jobs/cli/{SERVER_FILE}", f"{server}\n".encode()),
             (f"jobs/cli/{RELEASE_FILE}", f"{release()}\n".encode())]  # fmt: skip
    out = io.BytesIO()
    out.write(SHEBANG)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, data in sorted([*entries(), ("__main__.py", MAIN), *named]):
            info = zipfile.ZipInfo(name, date_time=WHEN)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zipped.writestr(info, data)
    return out.getvalue()


def etag(server: str) -> str:
    return hashlib.sha256(archive(server)).hexdigest()[:32]


@functools.cache
def release() -> str:
    """The CLI's release: a digest of all the archive holds but the files naming its server and
    its release, so copies downloaded at any of the server's addresses are of one release, and
    a change to the CLI's code or to a library it carries makes another. Reads the files once
    (10 to 30 ms; `entries` keeps them, 2 MB, for the archive), without building the archive."""
    digest = hashlib.sha256()
    for name, data in sorted([*entries(), ("__main__.py", MAIN)]):
        digest.update(f"{name}\0{len(data)}\0".encode())  # where one file ends and the next starts
        digest.update(data)
    return digest.hexdigest()[:16]


@functools.cache
def entries() -> tuple[tuple[str, bytes], ...]:
    """Every file the archive holds but its main, its server and its release: the project's
    modules, the libraries' files and their licenses, by their names in the archive."""
    found = dict([*own_files(), *library_files()])  # a license under two names: once
    return tuple((name, path.read_bytes()) for name, path in found.items())


def own_files():
    for part in OWN:
        path = ROOT / part
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if "__pycache__" not in file.parts:
                yield file.relative_to(ROOT).as_posix(), file


def library_files():
    for package, distribution in LIBRARIES.items():
        folder = Path(util.find_spec(package).submodule_search_locations[0])
        for file in sorted(folder.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and file.suffix not in COMPILED:
                yield f"{package}/{file.relative_to(folder).as_posix()}", file
        for license_file in licenses(distribution):
            yield f"licenses/{distribution}/{license_file.name}", license_file


def licenses(distribution: str) -> list[Path]:
    """The license files a library's distribution ships (LICENSE, NOTICE, COPYING...)."""
    dist = metadata.distribution(distribution)
    return [Path(dist.locate_file(f)) for f in dist.files or ()
            if f.name.upper().startswith(("LICENSE", "LICENCE", "NOTICE", "COPYING"))]  # fmt: skip
