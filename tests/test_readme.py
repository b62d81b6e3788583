"""The README stays true to the code: every setting the server reads from the environment is
in its configuration table, and every path of the users' API in its API table."""

import re
from pathlib import Path

from django.urls import get_resolver
from django.urls.resolvers import URLResolver

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# How the README writes a path's parameters.
WRITTEN = {
    "<int:pk>": "<id>",
    "<slug:slug>": "<slug>",
    "<str:name>": "<name>",
    "<str:username>": "<username>",
}


def paths(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from paths(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern)


def test_every_environment_setting_is_in_the_configuration_table():
    settings_py = (ROOT / "mlsched_site" / "settings.py").read_text()
    read = set(re.findall(r'(?:environ(?:\.get)?\(|environ\[|env_bool\()"([A-Z_]+)"', settings_py))

    missing = sorted(name for name in read if f"`{name}`" not in README)

    assert len(read) > 30 and missing == []


def test_every_path_of_the_users_api_is_in_the_api_table():
    api = [p for p in paths(get_resolver().url_patterns) if p.startswith("api/v1/")]
    api = [p for p in api if not p.startswith("api/v1/agent/")]

    def written(path: str) -> str:
        for pattern, text in WRITTEN.items():
            path = path.replace(pattern, text)
        return "/" + path

    def listed(path: str) -> bool:
        # A row may name a sibling path by its last part: "`.../release/`".
        last = path.rstrip("/").rsplit("/", 1)[-1]
        return f"{path}`" in README or f" {path}" in README or f"`.../{last}/`" in README

    missing = [written(p) for p in api if not listed(written(p))]

    assert len(api) > 20 and missing == []
