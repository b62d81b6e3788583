"""The control plane's clock, against which the times its components stamp are measured (an
event's first and last time, a node's Ready transition, a pod's creation): the agent's host
may run ahead of it or behind, and a span measured from one clock to the other would be off
by that much (a Multi-Attach error said a moment ago would read as lasting minutes).

Every answer of the API server carries a Date header (whole seconds, RFC 9110), stamped
between the request's send and the answer's receipt: the offset from the agent's clock to
the control plane's lies in (Date - received, Date + 1 - sent). The clock keeps the smallest
offset in that interval, 0 while the two clocks agree as far as the answer can tell, learned
anew from each answer read through it, and gives the agent's time moved by it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any


class ControlPlaneClock:
    def __init__(self) -> None:
        self.offset_s = 0.0  # seconds to add to the agent's time to have the control plane's

    def read(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """What `call` (a client's `..._with_http_info` method) answers, its data alone,
        learning the offset from the answer's Date header."""
        sent = time.time()
        data, _, headers = call(*args, **kwargs)
        self.learn((headers or {}).get("Date"), sent, time.time())
        return data

    def learn(self, date: str | None, sent: float, received: float) -> None:
        """Take the offset a Date header says, for an answer asked at `sent` and read at
        `received` (the agent's times); an answer without one, or with one that does not
        parse, changes nothing."""
        try:
            stamped = parsedate_to_datetime(date)
        except (TypeError, ValueError, IndexError):
            return
        if stamped.tzinfo is None:  # "-0000": UTC, the source's zone unknown
            stamped = stamped.replace(tzinfo=UTC)
        at = stamped.timestamp()
        low, high = at - received, at + 1 - sent
        self.offset_s = min(max(0.0, low), high)

    def now(self) -> datetime:
        """The control plane's time now, as far as its last answer told."""
        return datetime.fromtimestamp(time.time() + self.offset_s, UTC)
