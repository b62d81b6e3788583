"""A cache of the cluster's mlsched pods, kept current by a list followed by a watch.

The thread lists the pods once (the initial state and a resourceVersion), then watches from that
version, resuming from the last version seen whenever a watch request times out. When the API
server says the version is too old (410 Gone) or the connection fails, it lists again: pods that
vanished meanwhile are marked deleted, so no DELETED event is ever missed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from clusters.backends.k8s_specs import LABEL_ATTEMPT, LABEL_RANK

log = logging.getLogger(__name__)

Key = tuple[int, int]  # (attempt id, rank)


def pod_key(pod: client.V1Pod) -> Key | None:
    labels = (pod.metadata.labels if pod.metadata else None) or {}
    try:
        return int(labels[LABEL_ATTEMPT]), int(labels[LABEL_RANK])
    except (KeyError, ValueError):
        return None


class PodWatcher:
    """Last version seen of every pod matching `selector`, in all namespaces."""

    def __init__(
        self,
        core: client.CoreV1Api,
        selector: str,
        on_change: Callable[[Key, client.V1Pod], None],
        timeout_s: int = 60,
        backoff_s: float = 1.0,
    ):
        self.core, self.selector, self.on_change = core, selector, on_change
        self.timeout_s, self.backoff_s = timeout_s, backoff_s
        self.synced = threading.Event()
        self._lock = threading.Lock()
        self._pods: dict[Key, client.V1Pod] = {}
        self._deleted: set[Key] = set()
        # Forgotten attempts whose events are disregarded, each with its pods not yet seen
        # deleted: once they have all gone, no event can name the attempt again.
        self._ignored: dict[int, set[Key]] = {}
        # Held while an event is stored and handed on: once ignore() returns, no callback about
        # the attempt is under way either.
        self._handing = threading.Lock()
        # When each pod was last updated, on a counter: a list only proves a pod gone if the
        # pod was known before the list began (it may have been created since).
        self._tick = 0
        self._stamps: dict[Key, int] = {}
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name="k8s-pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        # Again and again: a watch request may only be opening as the first stop() lands.
        while self._thread.is_alive() and time.monotonic() < deadline:
            if self._watch is not None:
                self._watch.stop()
            self._thread.join(timeout=0.05)

    def snapshot(self) -> tuple[dict[Key, client.V1Pod], set[Key]]:
        """The pods seen (last version of each) and which of them are gone."""
        with self._lock:
            return dict(self._pods), set(self._deleted)

    def get(self, key: Key) -> tuple[client.V1Pod | None, bool]:
        """The last version seen of one pod (None if never seen) and whether it is gone."""
        with self._lock:
            return self._pods.get(key), key in self._deleted

    def remember(self, key: Key, pod: client.V1Pod) -> None:
        """Seed the cache with a pod just created, unless the watch already knows newer."""
        with self._lock:
            if key[0] not in self._ignored and key not in self._pods:
                self._store(key, pod)

    def ignore(self, attempt_id: int) -> None:
        """Drop the attempt's pods and disregard any later event about them, until they are
        gone."""
        with self._handing, self._lock:
            left = set()
            for key in [k for k in self._pods if k[0] == attempt_id]:
                self._pods.pop(key)
                self._stamps.pop(key, None)
                if key not in self._deleted:
                    left.add(key)
                self._deleted.discard(key)
            if left:
                self._ignored[attempt_id] = left

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch_from(self._relist())
            except ApiException as error:
                if error.status != 410:  # 410 Gone: our version is too old, list again now
                    self._failed(f"{error.status} {error.reason}")
            except Exception as error:  # a dropped connection must not end the watch for good
                self._failed(repr(error))

    def _failed(self, why: str) -> None:
        if not self._stop.is_set():
            log.warning("pod watch failed, listing again: %s", why)
            self._stop.wait(self.backoff_s)

    def _store(self, key: Key, pod: client.V1Pod) -> None:
        """Keep the pod's latest version; the caller holds the lock."""
        self._tick += 1
        self._pods[key] = pod
        self._stamps[key] = self._tick

    def _relist(self) -> str:
        with self._lock:
            began = self._tick
        listed = self.core.list_pod_for_all_namespaces(label_selector=self.selector)
        fresh = {key: pod for pod in listed.items if (key := pod_key(pod)) is not None}
        with self._handing:
            with self._lock:
                for key in set(self._pods) - set(fresh):
                    if self._stamps.get(key, 0) <= began:
                        self._deleted.add(key)
                for attempt_id in list(self._ignored):  # a list shows every pod left
                    left = {key for key in fresh if key[0] == attempt_id}
                    if left:
                        self._ignored[attempt_id] = left
                    else:
                        del self._ignored[attempt_id]
                changed = {k: pod for k, pod in fresh.items() if k[0] not in self._ignored}
                for key, pod in changed.items():
                    self._store(key, pod)
                    self._deleted.discard(key)
            self.synced.set()
            for key, pod in changed.items():
                self.on_change(key, pod)
        return listed.metadata.resource_version

    def _watch_from(self, version: str) -> None:
        while not self._stop.is_set():
            self._watch = watch.Watch()
            stream = self._watch.stream(
                self.core.list_pod_for_all_namespaces,
                label_selector=self.selector,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.timeout_s,
                # A silent, half-open connection must end too: allow a little over the timeout.
                _request_timeout=(5, self.timeout_s + 10),
            )
            for event in stream:
                self._apply(event["type"], event["object"])
            version = self._watch.resource_version or version

    def _apply(self, kind: str, pod: client.V1Pod) -> None:
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK: only moves the resourceVersion, which Watch tracks
        key = pod_key(pod)
        if key is None:
            return
        with self._handing:
            with self._lock:
                if key[0] in self._ignored:
                    return self._ignored_changed(key, kind)
                self._store(key, pod)
                if kind == "DELETED":
                    self._deleted.add(key)
                else:
                    self._deleted.discard(key)
            self.on_change(key, pod)

    def _ignored_changed(self, key: Key, kind: str) -> None:
        """Note which of an ignored attempt's pods are left; the caller holds the lock."""
        left = self._ignored[key[0]]
        if kind == "DELETED":
            left.discard(key)
        else:
            left.add(key)
        if not left:
            del self._ignored[key[0]]
