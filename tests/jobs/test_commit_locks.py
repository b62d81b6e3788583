"""What a commit locks: the nodes it places on, not their clusters, whose labels it reads with
them (commit.allowed_on). A cluster's row locked too would be taken in the nodes' order, which
other writers of it do not keep: concurrent schedulers deadlocked on it."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from clusters.models import Cluster
from jobs.commit import lock_nodes
from tests.factories import NodeFactory


@pytest.mark.django_db(transaction=True)
def test_locking_the_nodes_for_a_commit_leaves_their_cluster_free(east):
    east.labels = {"region": "eu"}
    east.save()
    node = NodeFactory(cluster=east)

    def cluster_free() -> bool:
        try:
            with transaction.atomic():
                Cluster.objects.select_for_update(nowait=True).get(pk=east.pk)
            return True
        except DatabaseError:  # could not obtain the lock
            return False
        finally:
            connection.close()

    with transaction.atomic():
        locked = lock_nodes([node.pk], timezone.now())
        with ThreadPoolExecutor(1) as other:
            free = other.submit(cluster_free).result()

    assert locked[node.pk].cluster_labels == {"region": "eu"}
    assert free
