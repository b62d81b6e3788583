"""A tenant's namespace, made ready before its first pod starts there: the namespace itself
(`<prefix><tenant>`), an optional ResourceQuota, the NetworkPolicy that lets only pods of the same
namespace in, and the claims the platform team provides (the checkpoint claim; the data volumes'
claims, bound, not being deleted, and with an access mode that lets the attempt's pods, on
their nodes, mount them as the job asks). Objects that already exist (409) are left alone, so
preparing twice is harmless. Without the right to create the namespace or its NetworkPolicy,
one an admin made in advance will do; without one, no pod starts unprotected (Refused)."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.backends import k8s_specs as specs


class Refused(Exception):
    """The attempt cannot start here as configured (a missing or unbound claim, one whose access
    modes do not fit the attempt, a missing NetworkPolicy)."""


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


# A claim's access modes (the PersistentVolume's, once bound): which pods may mount it at once.
RWO, ROX, RWX, RWOP = "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"
ACCESS_MODES = (RWO, RWOP, ROX, RWX)  # the order they are named in a refusal


def check_data_claims(
    core: client.CoreV1Api, namespace: str, volumes: tuple[dict, ...], *, nodes: int, pods: int
) -> None:
    """Refuse to start pods that would wait forever to mount a data volume: its claim is not in
    the namespace, not bound, or being deleted. The pods are bound to their nodes by mlsched,
    not by kube-scheduler, which is what binds a claim of a WaitForFirstConsumer storage class:
    such a claim would never bind, so each must be bound (provisioned) before its jobs run.

    Nor to start those that cannot all mount it as asked, `pods` pods on `nodes` nodes: a
    ReadWriteOnce claim is mounted on one node at a time (its pods there share it), a
    ReadWriteOncePod claim by one pod, a ReadOnlyMany claim read-only. kube-scheduler, which
    would keep a second pod off a ReadWriteOncePod claim, is bypassed here too; and a pod on a
    second node of a ReadWriteOnce volume waits forever for it to attach (Multi-Attach error),
    or on storage that does not enforce it, writes beside the first where it must not. The
    claim's modes are those of the volume bound to it (its status), else those it asked for."""
    for volume in volumes:
        said = f'data volume "{volume["name"]}": claim'
        found = _read_claim(core, namespace, volume["claim"], said)
        if found is None:  # no right to read claims: the pods will tell
            continue
        where = f'{said} "{volume["claim"]}" in {namespace}'
        phase = (found.status.phase if found.status else None) or "Pending"
        if phase != "Bound":
            raise Refused(
                f"{where} is {phase}, not Bound: bind it in advance (mlsched places pods "
                "itself, so a WaitForFirstConsumer claim never binds)"
            )
        if found.metadata is not None and found.metadata.deletion_timestamp is not None:
            raise Refused(f"{where} is being deleted")
        modes = _access_modes(found)
        if needs := _access_refusal(modes, not volume.get("read_only"), nodes, pods):
            raise Refused(f"{where} is {' and '.join(modes)}: {needs}")


def _access_modes(claim: client.V1PersistentVolumeClaim) -> list[str]:
    """The claim's access modes: those of the volume bound to it, else those it asked for."""
    bound = claim.status.access_modes if claim.status else None
    return list(bound or (claim.spec.access_modes if claim.spec else None) or [])


def _access_refusal(modes: list[str], writable: bool, nodes: int, pods: int) -> str:
    """What `pods` pods on `nodes` nodes, mounting a claim writable or not, need of its access
    modes when none of them will do; "" when one will, or none is known."""

    def usable(write: bool) -> set[str]:
        return (
            {RWX}
            | (set() if write else {ROX})
            | ({RWO} if nodes <= 1 else set())
            | ({RWOP} if pods <= 1 else set())
        )

    now = usable(writable)
    if not modes or now & set(modes):
        return ""
    if nodes > 1:
        who = f"a gang on {nodes} nodes"
    else:
        who = f"a gang of {pods} pods" if pods > 1 else "a job"
    said = f"{who} {'writing to' if writable else 'reading'} it needs {_named(now)}"
    if not writable:
        return said
    if usable(False) & set(modes):  # it would do, mounted read-only
        return f"{said}, or a read-only mount"
    return f"{said}, or {_named(usable(False) - now)} to read it"


def _named(modes: set[str]) -> str:
    names = [mode for mode in ACCESS_MODES if mode in modes]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


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
