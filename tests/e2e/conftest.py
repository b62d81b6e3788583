"""The browser tests' daphne server and Chromium page."""

import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import global_settings
from playwright.sync_api import sync_playwright

from tests.processes import ROOT, free_port, process_env, wait_until

# Playwright's sync API keeps an event loop running in this thread; the ORM calls the tests make
# between browser steps are still plain synchronous code (Django documents this switch for it).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip


@contextmanager
def daphne(**env):
    """The app served by daphne on a free port, `env` added to its environment: its URL."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
         "mlsched_site.asgi:application"],
        cwd=ROOT, env=process_env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: port_open(port), timeout=60), "daphne did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # an open websocket can keep it waiting
            server.kill()
            server.communicate()


@pytest.fixture
def server(settings):
    # The browser logs in through the real form: store a password the server can verify.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    with daphne() as url:
        yield url


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def browser_page():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=CHROMIUM_FLAGS)  # fmt: skip
        yield browser.new_page()
        browser.close()


@pytest.fixture
def policy_refused(browser_page):
    """What Chromium's console says the Content-Security-Policy refused on the browser page
    from the test's start: (the page's address then, the message)."""
    refused = []
    browser_page.on("console", lambda message: refused.append((browser_page.url, message.text))
                    if "Content Security Policy" in message.text else None)  # fmt: skip
    return refused
