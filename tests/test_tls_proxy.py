"""Behind a proxy that terminates TLS: settings read from the environment at start, so each
case runs in a process of its own against the test database."""

import subprocess
import sys

import pytest

from tests.processes import ROOT, process_env

pytestmark = pytest.mark.django_db(transaction=True)

LOGIN_OVER_THE_PROXY = """
import django
django.setup()
from django.test import Client
browser = Client(enforce_csrf_checks=True)
headers = {"HTTP_HOST": "mlsched.example.com", "HTTP_X_FORWARDED_PROTO": "https"}
page = browser.get("/accounts/login/", **headers)
token = page.cookies["csrftoken"]
answer = browser.post("/accounts/login/", {"username": "x", "password": "y",
                      "csrfmiddlewaretoken": token.value},
                      HTTP_ORIGIN="https://mlsched.example.com", **headers)
print(answer.status_code, token["secure"] or "-")
"""


def login_over_the_proxy(**env) -> list[str]:
    env = process_env(
        ALLOWED_HOSTS="mlsched.example.com", DJANGO_SETTINGS_MODULE="mlsched_site.settings", **env
    )
    done = subprocess.run([sys.executable, "-c", LOGIN_OVER_THE_PROXY], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_browser_on_https_logs_in_through_the_proxy_with_secure_cookies():
    status, secure = login_over_the_proxy(
        MLSCHED_BEHIND_TLS_PROXY="1", CSRF_TRUSTED_ORIGINS="https://mlsched.example.com"
    )

    assert status == "200"  # the form again (wrong password), not 403 for the origin
    assert secure == "True"


def test_without_the_setting_the_https_origin_is_refused():
    status, _ = login_over_the_proxy()

    assert status == "403"
