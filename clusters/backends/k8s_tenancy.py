"""A tenant's namespace, made ready before its first pod starts there: the namespace itself
(`<prefix><tenant>`), an optional ResourceQuota, the NetworkPolicy that lets only pods of the same
namespace in, and the checkpoint claim the platform team provides. Objects that already exist
(409) are left alone, so preparing twice is harmless. Without the right to create the namespace
or its NetworkPolicy, one an admin made in advance will do; without one, no pod starts
unprotected (Refused)."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.backends import k8s_specs as specs


class Refused(Exception):
    """The attempt cannot start here as configured (a missing claim or NetworkPolicy)."""


def prepare(
    core: client.CoreV1Api,
    networking: client.NetworkingV1Api,
    namespace: str,
    tenant: str,
    quota: dict | None,
    isolate: bool,
    claim: str | None,
) -> None:
    """Make the tenant's namespace ready for its pods, or raise Refused (or ApiException)."""
    try:
        create(core.create_namespace, None, specs.build_namespace(namespace, tenant))
    except ApiException as error:
        if error.status != 403:
            raise
        # Without the right to create namespaces, one an admin made in advance will do.
        core.read_namespace(namespace)
    if quota:
        limits = specs.build_quota(namespace, quota)
        create(core.create_namespaced_resource_quota, namespace, limits)
    if isolate:
        ensure_network_policy(networking, namespace)
    if claim:
        check_claim(core, namespace, claim)


def ensure_network_policy(networking: client.NetworkingV1Api, namespace: str) -> None:
    """The namespace's NetworkPolicy: no ingress from other namespaces (tenants)."""
    policy = specs.build_network_policy(namespace)
    try:
        create(networking.create_namespaced_network_policy, namespace, policy)
    except ApiException as error:
        if error.status != 403:
            raise
        try:
            networking.read_namespaced_network_policy(specs.NETWORK_POLICY, namespace)
        except ApiException as missing:
            if missing.status != 404:
                raise
            raise Refused(
                f'NetworkPolicy "{specs.NETWORK_POLICY}" missing in {namespace}, '
                "no right to create it"
            ) from None


def check_claim(core: client.CoreV1Api, namespace: str, claim: str) -> None:
    """Refuse to start pods that would wait forever for a claim the namespace lacks."""
    try:
        core.read_namespaced_persistent_volume_claim(claim, namespace)
    except ApiException as error:
        if error.status == 404:
            raise Refused(f'checkpoint claim "{claim}" missing in {namespace}') from None
        if error.status != 403:  # no right to look: the pods will tell
            raise


def create(method, namespace: str | None, body):
    """Create an object; None when it already exists."""
    try:
        if namespace is None:
            return method(body)
        return method(namespace, body)
    except ApiException as error:
        if error.status == 409:
            return None
        raise
