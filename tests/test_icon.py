"""Every page names the portal's icon, so a browser asks for no /favicon.ico (a 404 on every
page otherwise), and the icon is served from the app's static files."""

import re

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db

ICON = re.compile(r'<link rel="icon" href="/static/portal/icon\.svg" type="image/svg\+xml">')


def test_it_is_named_by_the_portals_pages_and_the_login_page(client, alice):
    assert ICON.search(client.get("/accounts/login/").content.decode())
    client.force_login(alice)
    for path in ["/", "/jobs/new/", "/quotas/", "/usage/"]:
        assert ICON.search(client.get(path).content.decode()), path


def test_it_is_named_by_the_admins_pages_once(client, admin_client):
    assert len(ICON.findall(client.get("/admin/login/").content.decode())) == 1
    for path in ["/admin/", "/admin/quotas/tenant/", "/admin/quotas/tenant/add/"]:
        assert len(ICON.findall(admin_client.get(path).content.decode())) == 1, path


def test_it_is_a_static_file_of_the_app():
    found = finders.find("portal/icon.svg")

    with open(found) as icon:
        assert icon.read().startswith("<svg")
