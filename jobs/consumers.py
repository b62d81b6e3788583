"""The job page's websocket: its state changes and its log lines, live.

One consumer per open job page. Permission is checked in connect(): a job the user may not see
is refused before anything is sent. State changes arrive through the job's tenant group (one
message listing the tenant's changes, however many jobs moved) and are filtered down to this
job here: the page hears at most one state per message, its job's latest. A batch's page (its
first shard's) also hears, at most once per message, that other shards of it moved.

A page stays open for hours, so before passing a message on the consumer checks again, at most
every RECHECK_S seconds, that the session's user may still see the job: a user removed from the
tenant, deactivated or logged out has the socket closed (4404) instead of hearing more.
"""

import time
from importlib import import_module
from types import SimpleNamespace
from typing import Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.generic.websocket import JsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user

from jobs import access, events
from jobs.models import Job

NOT_FOUND = 4404
RECHECK_S = 5.0


class StateMessage(TypedDict):
    """To the page: its job's state now, and why it moved there ("" on connect)."""

    type: Literal["state"]
    state: str
    reason: str


class ShardsMessage(TypedDict):
    """To a batch's page: another of its shards moved; the page reads the batch again (one
    read for a burst of them)."""

    type: Literal["shards"]


class LogsMessage(TypedDict):
    """To the page: new log lines of its job (possibly some it has already)."""

    type: Literal["logs"]
    lines: list[events.LogLine]


class JobConsumer(JsonWebsocketConsumer):
    def connect(self):
        job_id = int(self.scope["url_route"]["kwargs"]["pk"])
        job = (
            access.visible_jobs(self.scope["user"])
            .filter(pk=job_id)
            .values("id", "tenant_id", "state", "parent_id", "shards")
            .first()
        )
        if job is None:
            self.close(code=NOT_FOUND)
            return
        self.job_id, self.tenant_id = job_id, job["tenant_id"]
        # A batch's page (its first shard's) hears its other shards move too.
        is_batch = job["parent_id"] is None and job["shards"] > 1
        shards = Job.objects.filter(parent_id=job_id) if is_batch else Job.objects.none()
        self.shards = set(shards.values_list("pk", flat=True))
        self.outsider = self.reads_from_outside(self.scope["user"])
        self.checked_at = time.monotonic()
        self.groups_joined = [events.tenant_group(job["tenant_id"]), events.logs_group(job_id)]
        for group in self.groups_joined:
            async_to_sync(self.channel_layer.group_add)(group, self.channel_name)
        self.accept()
        self.send_json(StateMessage(type="state", state=job["state"], reason=""))

    def receive(self, text_data=None, bytes_data=None, **kwargs):
        """The page only listens: whatever a client sends (not always JSON) is ignored."""

    def disconnect(self, code):
        for group in getattr(self, "groups_joined", []):
            async_to_sync(self.channel_layer.group_discard)(group, self.channel_name)

    def still_allowed(self) -> bool:
        """Whether the session's user may still see the job; closes the socket if not. Whether
        they read it from outside its tenant is asked again with it."""
        if self.job_id is None:
            return False  # closed already: messages still in flight are dropped
        if time.monotonic() - self.checked_at < RECHECK_S:
            return True
        # The session as stored now, not the copy read at connect: a logout deletes it, and
        # get_user() refuses a deactivated user or one whose password has changed.
        store = import_module(settings.SESSION_ENGINE).SessionStore
        session = store(self.scope["session"].session_key)
        user = get_user(SimpleNamespace(session=session))
        if not access.visible_jobs(user).filter(pk=self.job_id).exists():
            self.job_id = None
            self.close(code=NOT_FOUND)
            return False
        # A member who left the team but holds a grant on this job now reads it from outside.
        self.outsider = self.reads_from_outside(user)
        self.checked_at = time.monotonic()
        return True

    def reads_from_outside(self, user) -> bool:
        """Whether the user sees the job through a grant on it alone, outside its tenant: then
        reasons lose the ids of the team's other jobs, as the API gives them."""
        return not access.tenants_of(user).filter(pk=self.tenant_id).exists()

    def job_changes(self, message: events.JobChanges):
        # Changes are listed in commit order: the last one of this job is where it is now.
        mine = [change for change in message["changes"] if change["job"] == self.job_id]
        if mine and self.still_allowed():
            latest = mine[-1]
            reason = latest["reason"]
            if self.outsider:
                reason = access.outsiders_reason(reason)
            self.send_json(StateMessage(type="state", state=latest["to_state"], reason=reason))
        # Its own state message has the page read the batch anyway.
        elif self.shards_moved(message["changes"]) and self.still_allowed():
            self.send_json(ShardsMessage(type="shards"))

    def shards_moved(self, changes: list[events.JobChange]) -> bool:
        return bool(self.shards) and any(change["job"] in self.shards for change in changes)

    def job_logs(self, message: events.JobLogs):
        if not self.still_allowed():
            return
        self.send_json(LogsMessage(type="logs", lines=message["lines"]))
