"""Follow each started pod's log and number its lines.

One thread per pod reads the log with follow=true. Line n of a pod's log gets seq n: after a
dropped connection the thread reads the log again from the start and skips the lines it already
has, so the control plane can deduplicate. The kubelet serves only the latest log file, so once
it has rotated the log (past containerLogMaxSize) a read again begins further on: the lines
already taken are then known by their stamps, and the new ones go on from the last seq.

A backend restarted while a pod runs cannot tell from the log whether it begins at line 0, so
the reader of a pod it did not create waits (`unplaced`) until it is told where the control
plane's copy of the log ends (`resume`, from the agent's heartbeat: the last line's seq and
stamp, and line 0's stamp and head). A log that still begins with that line 0 has not rotated:
its lines are numbered by their place, as before the restart, and those up to the last seq are
skipped, whatever their stamps. Otherwise it skips the lines up to the last one by their stamps,
as after a rotation, and numbers the next one on from its seq. A pod created by this backend is
read from its start at once (`from_start`).

Kubernetes interleaves stdout and stderr into one log, reported as "stdout". A line is kept to its
first base.MAX_LINE characters, as the control plane keeps it.

The log is read with timestamps: Kubernetes stamps every line with the time the container
runtime took it from the container, and the stamp is cut off the line's text. A line that is
exactly the checkpoint line (base.CHECKPOINT_LINE) is the job reporting a saved checkpoint:
`checkpoint_at(key)` is the latest stamp of such a line in the pod's log. It is the line's own
time, not the agent's, so a log read again (a dropped stream, a restarted agent) gives the
same; only a line without a stamp gets the time the agent read it.

`caught_up(key)` tells whether a pod's whole log has been read (or can no longer be): the backend
reports a pod's end only then, so a job is never seen ended with its last lines missing. When a
pod ends, `wake(key)` makes a reader waiting to read again after a dropped stream read at once.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusters.backends import base
from clusters.backends.base import LogLine, LogResume, is_checkpoint_line
from clusters.backends.k8s_clock import ControlPlaneClock
from clusters.backends.k8s_specs import CONTAINER

log = logging.getLogger(__name__)

Key = tuple[int, int]  # (attempt id, rank)

# The stamp Kubernetes puts before each line with timestamps=true (RFC 3339, nanoseconds), and
# the space that ends it.
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")
# A reader holds at most the bytes the control plane's characters of a line take in UTF-8,
# and the stamp: a longer line is cut to them.
MAX_LINE_BYTES = 4 * base.MAX_LINE + 64


class LogFollowers:
    """Log threads for pods; `drain()` hands over the lines read since the last call."""

    def __init__(
        self,
        core: client.CoreV1Api,
        is_done: Callable[[Key], bool],
        retry_s: float = 1.0,
        clock: ControlPlaneClock | None = None,
    ):
        self.core, self.is_done, self.retry_s = core, is_done, retry_s
        # A checkpoint line's stamp is the cluster's time: it is moved onto the agent's clock.
        self.clock = clock or ControlPlaneClock()
        self._lock = threading.Lock()
        self._lines: list[LogLine] = []
        self._seen: dict[Key, int] = {}  # lines read per pod: the next line's seq
        # The latest checkpoint line's time per pod, on the agent's clock.
        self._checkpoints: dict[Key, float] = {}
        # The log's line 0: its stamp and base.line_head.
        self._first: dict[Key, tuple[float | None, str]] = {}
        # The last line's stamp, and how many lines taken in a row had it.
        self._last: dict[Key, tuple[float | None, int]] = {}
        self._threads: dict[Key, threading.Thread] = {}
        self._responses: dict[Key, object] = {}
        self._complete: set[Key] = set()  # pods whose whole log has been read
        self._gone: set[Key] = set()  # pods whose log can no longer be read (404)
        self._wake: dict[Key, threading.Event] = {}  # set: read again now, without retry_s
        self._placed: set[Key] = set()  # pods whose log's numbering start is known
        self._unplaced: dict[Key, threading.Event] = {}  # set: told where to number from
        self._closed = threading.Event()

    def follow(self, key: Key, namespace: str, name: str) -> None:
        """Start reading the pod's log unless a thread already does. The log of a pod not
        created by this backend is read once `resume` has told where to number it from."""
        with self._lock:
            alive = key in self._threads and self._threads[key].is_alive()
            done = key in self._complete or key in self._gone
            if alive or done or self._closed.is_set():
                return
            if key not in self._placed:
                self._unplaced.setdefault(key, threading.Event())
            thread = threading.Thread(
                target=self._run, args=(key, namespace, name), name=f"k8s-log-{name}", daemon=True
            )
            self._threads[key] = thread
        thread.start()

    def from_start(self, key: Key) -> None:
        """The pod is new, created by this backend: its log is numbered from line 0, without
        waiting to be told where the control plane's copy ends (it has none)."""
        with self._lock:
            self._placed.add(key)
            event = self._unplaced.pop(key, None)
        if event is not None:
            event.set()

    def unplaced(self) -> list[Key]:
        """The pods whose log is followed but waits to be told where to number it from."""
        with self._lock:
            return sorted(self._unplaced)

    def placed(self, key: Key) -> bool:
        """Whether the pod's log is not waiting to be told where to number it from."""
        with self._lock:
            return key not in self._unplaced

    def resume(self, key: Key, point: LogResume | None) -> None:
        """Number the pod's log on after the control plane's last line of it (None: it has
        none, so from line 0). A log that begins with the control plane's line 0 is numbered by
        place; otherwise the lines stamped before the last line's stamp, and as many as it
        counts with that stamp, are its already. Only for a log waiting for it."""
        with self._lock:
            event = self._unplaced.pop(key, None)
            if event is None:
                return
            self._placed.add(key)
            if point is not None:
                self._seen[key] = point.seq + 1
                self._last[key] = (point.at, point.taken)
                if point.first is not None and point.at is not None:
                    # Without the last line's stamp the log is numbered by place anyway.
                    self._first[key] = point.first
        event.set()

    def caught_up(self, key: Key) -> bool:
        """Whether the pod's log has been read to its end (it had ended) or is gone: no line of
        it is left to read. The lines read are in the next `drain()`."""
        with self._lock:
            return key in self._complete or key in self._gone

    def wake(self, key: Key) -> None:
        """Read the pod's log again now if its reader waits to retry (the pod has ended)."""
        with self._lock:
            event = self._wake.get(key)
        if event is not None:
            event.set()

    def checkpoint_at(self, key: Key) -> float | None:
        """When the pod's log last reported a saved checkpoint (seconds since the epoch), if
        any line read so far did."""
        with self._lock:
            return self._checkpoints.get(key)

    def drain(self) -> list[LogLine]:
        with self._lock:
            lines, self._lines = self._lines, []
        return lines

    def drop(self, attempt_id: int) -> None:
        """Stop following the attempt's pods, whose readers end, and keep nothing of them; the
        caller follows none of them again. Lines already read are still handed over: the
        attempt may be forgotten between a drain and its last lines. The backend reports a
        pod's end (and so lets it be forgotten) only once `caught_up`, so nothing is left to
        read unless the log could not be read at all."""
        with self._lock:
            for key in [k for k in self._threads if k[0] == attempt_id]:
                self._threads.pop(key)
                self._seen.pop(key, None)
                self._checkpoints.pop(key, None)
                self._first.pop(key, None)
                self._last.pop(key, None)
                self._complete.discard(key)
                self._gone.discard(key)
            self._placed = {k for k in self._placed if k[0] != attempt_id}
            responses = [r for k, r in self._responses.items() if k[0] == attempt_id]
            events = [self._wake.pop(k) for k in list(self._wake) if k[0] == attempt_id]
            events += [self._unplaced.pop(k) for k in list(self._unplaced) if k[0] == attempt_id]
        for response in responses:
            _shutdown(response)
        for event in events:
            event.set()  # a reader waiting to retry ends now

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            responses = list(self._responses.values())
            events = list(self._wake.values()) + list(self._unplaced.values())
        for response in responses:
            _shutdown(response)
        for event in events:
            event.set()

    def _active(self, key: Key) -> bool:
        """Whether the calling reader still follows its pod: not once its attempt is dropped."""
        return not self._closed.is_set() and self._threads.get(key) is threading.current_thread()

    def _run(self, key: Key, namespace: str, name: str) -> None:
        with self._lock:
            if not self._active(key):
                return
            wake = self._wake.setdefault(key, threading.Event())
            unplaced = self._unplaced.get(key)
        if unplaced is not None:
            unplaced.wait()  # until resume() or from_start(), or the attempt is dropped
        while self._active(key):
            # Once the pod has ended, one complete read has every line: then stop.
            wake.clear()
            ended_before = self.is_done(key)
            try:
                self._read(key, namespace, name, ended_before)
                if ended_before:
                    with self._lock:
                        self._complete.add(key)
                    return
                if self.is_done(key):
                    continue  # it ended while followed: read once more for the last lines
            except ApiException as error:
                if error.status == 404:
                    with self._lock:
                        self._gone.add(key)
                    return  # the pod is gone, and its log with it
                log.info("log of %s: %s %s", name, error.status, error.reason)
            except Exception as error:  # a dropped stream is read again from the start
                log.info("log of %s: %r", name, error)
            wake.wait(self.retry_s)  # or until the pod ends: its end waits for the last lines

    def _read(self, key: Key, namespace: str, name: str, complete: bool) -> None:
        response = self.core.read_namespaced_pod_log(
            name, namespace, container=CONTAINER, follow=True, timestamps=True,
            _preload_content=False,
        )  # fmt: skip
        with self._lock:
            self._responses[key] = response
        try:
            if not 200 <= response.status <= 299:
                raise ApiException(status=response.status, reason=response.reason)
            lines = _lines(response, keep_partial=complete)
            for seq, at, text in self._numbered(key, lines):
                self._take(key, seq, at, text)
        finally:
            with self._lock:
                self._responses.pop(key, None)
            response.release_conn()

    def _numbered(
        self, key: Key, lines: Iterator[str]
    ) -> Iterator[tuple[int | None, float | None, str]]:
        """(seq, stamp, text) of each line read, seq None for one taken already: line n of the
        log has seq n, so the lines of a log read again are known by it, whatever their stamps.
        Unless the read does not begin with the log's line 0 (taken by this reader, or told by
        `resume`): the kubelet has rotated the log file since (a read gets the latest file
        only, which begins further on), or the reader was told where the control plane's copy
        ends without its line 0. Its lines up to the last one taken are then known by their
        stamps: those stamped before it, and as many as were taken with its stamp. The next
        goes on from the last seq."""
        with self._lock:
            first, seen = self._first.get(key), self._seen.get(key, 0)
            last_at, taken_at_last = self._last.get(key, (None, 0))
        placing, offset, same = False, 0, 0
        for index, line in enumerate(lines):
            at, text = stamped(line)
            if index == 0:
                begins = first == (at, base.line_head(text))
                placing = not begins and (first is not None or last_at is not None)
            if placing:
                same += at == last_at
                older = at is not None and last_at is not None and at < last_at
                if older or (at == last_at and same <= taken_at_last):
                    if at == last_at and same == taken_at_last:
                        # The last line taken: those after it are new, even stamped earlier
                        # (the node's clock stepped back).
                        placing, offset = False, seen - index - 1
                    yield None, at, text
                    continue
                placing, offset = False, seen - index
            yield index + offset, at, text

    def _take(self, key: Key, seq: int | None, at: float | None, text: str) -> None:
        """Hand the line over if it is new. A checkpoint line counts even if it was taken
        already, by its stamp: a restarted backend skips the lines the control plane has, but
        may not have reported a checkpoint among them yet."""
        with self._lock:
            if not self._active(key):
                return
            if seq is not None and seq >= self._seen.get(key, 0):
                self._append(key, seq, at, text)
            elif at is None:
                return  # taken before, when its checkpoint was noted with the time it was read
            if is_checkpoint_line(text):
                at = time.time() if at is None else at - self.clock.offset_s
                self._checkpoints[key] = max(at, self._checkpoints.get(key, at))

    def _append(self, key: Key, seq: int, at: float | None, text: str) -> None:
        """Keep a new line for the next drain(); the caller holds the lock."""
        if seq == 0:
            self._first[key] = (at, base.line_head(text))
        last_at, count = self._last.get(key, (None, 0))
        self._last[key] = (at, count + 1 if at == last_at else 1)
        self._seen[key] = seq + 1
        self._lines.append(LogLine(key[0], key[1], seq, "stdout", text[: base.MAX_LINE], at))


def stamped(line: str) -> tuple[float | None, str]:
    """(the time Kubernetes stamped on the line, the line's text); (None, the whole line) for a
    line without a stamp."""
    match = STAMP.match(line)
    if match is None:
        return None, line
    try:
        at = datetime.fromisoformat(match[1]).timestamp()
    except ValueError:  # shaped like a stamp, not a real time
        return None, line
    return at, line[match.end() :]


def _lines(response, keep_partial: bool) -> Iterator[str]:
    """Complete lines of a streamed body. A last line without a newline only counts when the
    log is complete; otherwise it is read again whole next time. A line longer than
    MAX_LINE_BYTES counts as its first MAX_LINE_BYTES, handed over at once; the rest of it is
    skipped, so a line that never ends (a progress bar redrawn with "\r") costs neither memory
    nor time."""
    buffer, cut = b"", False  # cut: the line's head was handed over, skip to its end
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if not cut:
                yield _text(line)
            cut = False
        if len(buffer) > MAX_LINE_BYTES:
            if not cut:
                yield _text(buffer[:MAX_LINE_BYTES])
            buffer, cut = b"", True
    if buffer and keep_partial and not cut:
        yield _text(buffer)


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="replace").rstrip("\r")


def _shutdown(response) -> None:
    """Unblock a thread waiting on a followed log."""
    try:
        shutdown = getattr(response, "shutdown", None)
        (shutdown or response.close)()
    except Exception:  # closing a stream that already broke is fine
        pass
