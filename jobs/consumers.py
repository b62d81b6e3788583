"""The job page's websocket: its state changes and its log lines, live.

One consumer per open job page. Permission is checked in connect(): a job the user may not see
is refused before anything is sent. State changes arrive through the job's tenant group (one
message per commit for the whole tenant) and are filtered down to this job here.
"""

from asgiref.sync import async_to_sync
from channels.generic.websocket import JsonWebsocketConsumer

from jobs import access, events

NOT_FOUND = 4404


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
        self.send_json({"type": "state", "state": job["state"], "reason": ""})

    def receive(self, text_data=None, bytes_data=None, **kwargs):
        """The page only listens: whatever a client sends (not always JSON) is ignored."""

    def disconnect(self, code):
        for group in getattr(self, "groups_joined", []):
            async_to_sync(self.channel_layer.group_discard)(group, self.channel_name)

    def job_changes(self, message: events.JobChanges):
        for change in message["changes"]:
            if change["job"] == self.job_id:
                self.send_json(
                    {"type": "state", "state": change["to_state"], "reason": change["reason"]}
                )

    def job_logs(self, message: events.JobLogs):
        self.send_json({"type": "logs", "lines": message["lines"]})
