"""The job page's websocket: its state changes and its log lines, live.

One consumer per open job page. Permission is checked in connect(): a job the user may not see
is refused before anything is sent. State changes arrive through the job's tenant group (one
message listing the tenant's changes, however many jobs moved) and are filtered down to this
job here: the page hears at most one state per message, its job's latest.
"""

from typing import Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.generic.websocket import JsonWebsocketConsumer

from jobs import access, events

NOT_FOUND = 4404


class StateMessage(TypedDict):
    """To the page: its job's state now, and why it moved there ("" on connect)."""

    type: Literal["state"]
    state: str
    reason: str


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
            .values("id", "tenant_id", "state")
            .first()
        )
        if job is None:
            self.close(code=NOT_FOUND)
            return
        self.job_id = job_id
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

    def job_changes(self, message: events.JobChanges):
        # Changes are listed in commit order: the last one of this job is where it is now.
        mine = [change for change in message["changes"] if change["job"] == self.job_id]
        if mine:
            latest = mine[-1]
            self.send_json(
                StateMessage(type="state", state=latest["to_state"], reason=latest["reason"])
            )

    def job_logs(self, message: events.JobLogs):
        self.send_json(LogsMessage(type="logs", lines=message["lines"]))
