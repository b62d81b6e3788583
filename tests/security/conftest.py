"""Clients whose server errors come back as 500 answers, not as exceptions: Alice's API client
and her logged-in portal client."""

import pytest
from rest_framework.test import APIClient


@pytest.fixture
def api(alice):
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(alice)
    return client


@pytest.fixture
def portal(client, alice):
    client.raise_request_exception = False
    client.force_login(alice)
    return client
