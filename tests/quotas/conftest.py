import pytest
from django.test import Client

from tests.factories import UserFactory


@pytest.fixture
def platform_admin(db):
    """A superuser's admin client."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(root)
    client.user = root
    return client
