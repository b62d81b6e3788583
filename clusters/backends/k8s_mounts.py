"""Pods that cannot mount a volume because the Secret or ConfigMap it names is missing, or its
claim is missing, being deleted or unbound, found in the kubelet's FailedMount events (the rule:
`k8s_status.mount_failure_in_events`); or whose claim's volume cannot be attached to their node,
found in the attach-detach controller's FailedAttachVolume events
(`k8s_status.attach_failure_in_events`).

A pod in that state never changes (Pending, its container waiting ContainerCreating), so the
pod watch tells nothing: the events are listed instead, the Warning ones alone (a field
selector cannot ask for either of two reasons), one request per namespace with such a pod, at
most every `check_s`. A pod younger than `persisted_s` cannot have failed for that long yet and
reads none. Times are the control plane's (`k8s_clock`), as the events' are: a pod's age and a
Multi-Attach error's span are measured on it, whatever the agent's clock says. An attach
failure found so is checked against the controller's Normal
SuccessfulAttachVolume events, listed then (one request more, in that namespace alone): a
volume attached since its last failure is being mounted, not failing. Once found, a failure
stands for the pod: its attempt is reported failed until it is forgotten.

A Multi-Attach error names the volume another node holds. While that node is not ready, the
controller detaches it by force after `force_detach_s`, so the error is given that much more;
which node holds it is read from the VolumeAttachment objects (storage.k8s.io, cluster-scoped:
RBAC `list` on volumeattachments), listed once a pass while a node of the cluster is not ready
and a pod waits on such an error. A volume held by a ready node fails at `persisted_s`. Where
they cannot be read (no RBAC, no CSI driver's attachment for the volume), every Multi-Attach
error gets the longer wait while any node is not ready.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from clusters.backends.k8s_clock import ControlPlaneClock
from clusters.backends.k8s_status import (
    ATTACHED,
    NODE_READY,
    attach_failure_in_events,
    mount_failure_in_events,
    waits_to_mount,
)
from clusters.backends.k8s_watch import Key

log = logging.getLogger(__name__)

# How long the attach-detach controller waits before it detaches a volume by force from a node
# that is not ready (maxWaitForUnmountDuration, 6 minutes): until then a ReadWriteOnce volume
# that node held fails every other node's attach as Multi-Attach.
FORCE_DETACH_S = 360.0


class MountFailures:
    """Each pod's lasting failure to mount or attach a volume, "" while it has none."""

    def __init__(
        self,
        core: client.CoreV1Api,
        persisted_s: float,
        check_s: float,
        clock: ControlPlaneClock,
        force_detach_s: float = FORCE_DETACH_S,
        storage: client.StorageV1Api | None = None,
    ):
        self.core, self.persisted_s, self.check_s = core, persisted_s, check_s
        self.clock, self.force_detach_s, self.storage = clock, force_detach_s, storage
        self._lock = threading.Lock()
        self._errors: dict[Key, str] = {}
        self._read_at: dict[str, float] = {}  # namespace -> when its events were last listed

    def error(self, key: Key) -> str:
        with self._lock:
            return self._errors.get(key, "")

    def forget(self, attempt_id: int) -> None:
        with self._lock:
            for key in [k for k in self._errors if k[0] == attempt_id]:
                self._errors.pop(key)

    def check(
        self, pods: dict[Key, client.V1Pod], deleted: set[Key], nodes: dict[str, str] | None = None
    ) -> None:
        """Read the events of each namespace where a pod has waited to mount its volumes for
        `persisted_s` at least, unless read less than `check_s` ago. A Multi-Attach error on a
        volume held by a node that is not ready (`nodes`: each node's state, k8s_status'
        NODE_READY and the others; None: not known) is given `force_detach_s` more: the
        controller detaches it from that node by force only then."""
        now = time.monotonic()
        multi_attach_s = self._multi_attach_bound(nodes)
        waiting: dict[str, list[Key]] = {}
        for key, pod in pods.items():
            if key not in deleted and not self.error(key) and self._may_have_failed(pod):
                waiting.setdefault(pod.metadata.namespace, []).append(key)
        for namespace, keys in sorted(waiting.items()):
            if now - self._read_at.get(namespace, -math.inf) < self.check_s:
                continue
            self._read_at[namespace] = now
            events = self._events(namespace, "type=Warning") or []
            wall = self.clock.now()  # as the listing's answer tells it
            attached = functools.cache(lambda ns: self._events(ns, f"reason={ATTACHED}"))
            for key in keys:
                meta = pods[key].metadata
                found = mount_failure_in_events(events, meta.name, meta.uid, self.persisted_s)
                # The successes are listed once, if need be; unread, the failure waits for
                # the next listing.
                if (
                    not found
                    and self._attach_failure(events, meta, wall, multi_attach_s)
                    and (successes := attached(namespace)) is not None
                ):
                    found = self._attach_failure(events + successes, meta, wall, multi_attach_s)
                if found:
                    log.warning("attempt %s rank %s: %s", *key, found)
                    with self._lock:
                        self._errors[key] = found

    def _multi_attach_bound(self, nodes: dict[str, str] | None) -> Callable[[str], float] | None:
        """How long a Multi-Attach error on a volume lasts before it counts (None: every
        volume's `persisted_s`): `force_detach_s` more while a node holding it is not ready or
        gone, as the VolumeAttachments say (read once, when first asked); where they do not
        say, while any node is not ready."""
        if nodes is None or all(state == NODE_READY for state in nodes.values()):
            return None
        longer = self.persisted_s + self.force_detach_s
        holders = functools.cache(self._volume_holders)

        def bound(volume: str) -> float:
            held_by = holders().get(volume)
            if held_by is None or any(nodes.get(node) != NODE_READY for node in held_by):
                return longer
            return self.persisted_s

        return bound

    def _volume_holders(self) -> dict[str, set[str]]:
        """PersistentVolume name -> the nodes its VolumeAttachments name; {} when unread."""
        if self.storage is None:
            return {}
        try:
            attachments = self.storage.list_volume_attachment().items
        except (ApiException, HTTPError) as error:
            log.warning("volume attachments: %s", error)
            return {}
        holders: dict[str, set[str]] = {}
        for attachment in attachments:
            volume = attachment.spec.source.persistent_volume_name
            if volume:
                holders.setdefault(volume, set()).add(attachment.spec.node_name)
        return holders

    def _attach_failure(
        self,
        events: list[client.CoreV1Event],
        meta: client.V1ObjectMeta,
        now: datetime,
        multi_attach_s: Callable[[str], float] | None,
    ) -> str:
        return attach_failure_in_events(
            events, meta.name, meta.uid, self.persisted_s, now, multi_attach_s
        )

    def _may_have_failed(self, pod: client.V1Pod) -> bool:
        """The pod waits to mount, and is old enough to have failed for `persisted_s`."""
        if not waits_to_mount(pod):
            return False
        created = pod.metadata.creation_timestamp
        return created is None or (self.clock.now() - created).total_seconds() >= self.persisted_s

    def _events(self, namespace: str, selector: str) -> list[client.CoreV1Event] | None:
        """The namespace's events the field selector picks; None if they could not be read
        (without the Warning ones, a pod waits for the control plane's start timeout, as
        before)."""
        try:
            return self.clock.read(
                self.core.list_namespaced_event_with_http_info, namespace, field_selector=selector
            ).items
        except (ApiException, HTTPError) as error:
            log.warning("events (%s) in %s: %s", selector, namespace, error)
            return None
