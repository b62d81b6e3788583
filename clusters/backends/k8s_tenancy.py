"""A tenant's namespace, made ready before its first pod starts there: the namespace itself
(`<prefix><tenant>`), an optional ResourceQuota, the NetworkPolicy that lets only pods of the same
namespace in, and the claims the platform team provides (the checkpoint claim; the data volumes'
claims, bound). Objects that already exist (409) are left alone, so preparing twice is
harmless. Without the right to create the namespace or its NetworkPolicy, one an admin made in
advance will do; without one, no pod starts unprotected (Refused)."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.backends import k8s_specs as specs


class Refused(Exception):
    """The attempt cannot start here as configured (a missing or unbound claim, a missing
    NetworkPolicy)."""


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
    _read_claim(core, namespace, claim, "checkpoint claim")


def check_data_claims(core: client.CoreV1Api, namespace: str, volumes: tuple[dict, ...]) -> None:
    """Refuse to start pods that would wait forever to mount a data volume: its claim is not in
    the namespace, or not bound. The pods are bound to their nodes by mlsched, not by
    kube-scheduler, which is what binds a claim of a WaitForFirstConsumer storage class: such a
    claim would never bind, so each must be bound (provisioned) before its jobs run."""
    for volume in volumes:
        said = f'data volume "{volume["name"]}": claim'
        found = _read_claim(core, namespace, volume["claim"], said)
        phase = (found.status.phase if found is not None and found.status else None) or "Pending"
        if found is not None and phase != "Bound":
            raise Refused(f'{said} "{volume["claim"]}" in {namespace} is {phase}, not Bound')


def _read_claim(
    core: client.CoreV1Api, namespace: str, claim: str, said: str
) -> client.V1PersistentVolumeClaim | None:
    """The claim, or None when this agent may not read claims; Refused when it is missing."""
    try:
        return core.read_namespaced_persistent_volume_claim(claim, namespace)
    except ApiException as error:
        if error.status == 404:
            raise Refused(f'{said} "{claim}" missing in {namespace}') from None
        if error.status != 403:  # no right to look: the pods will tell
            raise
    return None


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
