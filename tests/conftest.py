"""Shared fixtures: the users trio every access test reuses, and cluster "east" with its agent.

Alice owns team "alpha"; Bob is a member of Alice's team; Charlie is in team "gamma" only.
"""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from quotas.models import Membership
from tests.factories import ClusterFactory, MembershipFactory, TenantFactory, UserFactory


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's, ending at teardown the sessions servers and threads of the run left on
    the test database, which PostgreSQL would not drop while they are open."""
    yield
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # The default hasher spends ~0.3 s per password on purpose; factories make hundreds.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_caches():
    # API rate counters and the platform-wide metrics live in shared caches (Redis database 1
    # under make test): each test starts with none, whatever ran before it.
    from django.core.cache import caches

    caches["throttle"].clear()
    caches["shared"].clear()
    caches["default"].clear()


@pytest.fixture(autouse=True)
def fresh_async_connection(django_db_blocker):
    # Sync code called from async tests runs in asgiref's one shared thread, whose database
    # session outlives the test; a test that ended sessions (a database outage) would leave it
    # dead for the next async test. With no persistent connections it is always obsolete:
    # closing it here makes the next use reconnect. Before a test without the database too:
    # checking the session asks it whether it is in autocommit, which pytest-django blocks.
    from asgiref.sync import SyncToAsync
    from django.db import close_old_connections

    with django_db_blocker.unblock():
        SyncToAsync.single_thread_executor.submit(close_old_connections).result()


@pytest.fixture
def alpha(db):
    return TenantFactory(name="Alpha", slug="alpha")


@pytest.fixture
def gamma(db):
    return TenantFactory(name="Gamma", slug="gamma")


@pytest.fixture
def alice(alpha):
    user = UserFactory(username="alice")
    MembershipFactory(tenant=alpha, user=user, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def bob(alpha):
    user = UserFactory(username="bob")
    MembershipFactory(tenant=alpha, user=user, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def charlie(gamma):
    user = UserFactory(username="charlie")
    MembershipFactory(tenant=gamma, user=user, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def east(db):
    return ClusterFactory(name="east")


@pytest.fixture
def agent_of(db):
    """Makes the API client of a cluster's agent: it holds a new token of that cluster (the
    cluster's earlier token stops working)."""

    def client_of(cluster):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Agent {cluster.rotate_token()}")
        return client

    return client_of


@pytest.fixture
def agent(east, agent_of):
    """An API client holding east's agent token."""
    return agent_of(east)


@pytest.fixture
def latest_migrations_after():
    """For a test that migrates the database back to try a migration: the tests after it run
    on every migration."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.fixture
def scrape(client, settings):
    """/metrics as a scraper with its token reads it: its lines."""
    settings.MLSCHED_METRICS_TOKEN = "scrape-me"

    def get():
        response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me")
        assert response.status_code == 200
        return response.text.splitlines()

    return get


@pytest.fixture
def provider(settings, monkeypatch):
    """An OpenID provider on this machine (tests/oidc_provider.py), read afresh, the portal its
    client with a secret, groups read from the ID token's `groups`."""
    from quotas import oidc
    from tests.oidc_provider import Provider

    monkeypatch.setattr(oidc, "_fetched", {})
    with Provider() as provider:
        settings.MLSCHED_OIDC_ISSUER = provider.issuer
        settings.MLSCHED_OIDC_CLIENT_ID = provider.client_id
        settings.MLSCHED_OIDC_CLIENT_SECRET = provider.client_secret
        settings.MLSCHED_OIDC_NAME = "Corp SSO"
        settings.MLSCHED_OIDC_GROUPS_CLAIM = "groups"
        yield provider
