import pytest
from django.test import Client

from tests.factories import UserFactory
from tests.quotas.scim_provider import TOKEN, ScimClient


@pytest.fixture
def platform_admin(db):
    """A superuser's admin client."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(root)
    client.user = root
    return client


@pytest.fixture
def root(db):
    """A platform admin, the first superuser (whom apply_teams records its changes as)."""
    return UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def teams(tmp_path):
    """Writes a teams file; its path."""

    def written(text: str) -> str:
        path = tmp_path / "teams.yaml"
        path.write_text(text)
        return str(path)

    return written


@pytest.fixture
def scim(settings, db):
    """The identity provider pushing over SCIM (tests/quotas/scim_provider.py): SCIM on."""
    settings.MLSCHED_SCIM_TOKEN = TOKEN
    return ScimClient()
