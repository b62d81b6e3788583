"""The agent loop facing output and state the control plane would turn away: stand-ins for
the backend and the control plane, no database."""

import json

from clusters.agent.runner import Agent
from clusters.backends.base import LogLine
from tests.clusters.test_agent_runner import Recorder, Reports, bad_request

REQUEST_LIMIT = 8 * 1024 * 1024  # DATA_UPLOAD_MAX_MEMORY_SIZE


class RefusesLargeBodies(Recorder):
    """Refuses a log batch whose body passes the control plane's request limit, as Django
    does; keeps the lines of the others."""

    def logs(self, lines):
        body = json.dumps({"lines": [line.__dict__ for line in lines]})
        if len(body) > REQUEST_LIMIT:
            raise bad_request(
                {"detail": "Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE."}
            )
        return super().logs(lines)


class Prints(Reports):
    """A backend with no workers that hands over these lines once."""

    def __init__(self, lines):
        super().__init__([])
        self.lines = lines

    def logs(self):
        lines, self.lines = self.lines, []
        return lines


def test_a_line_longer_than_a_request_is_shipped_cut_not_refused_and_lost():
    huge = LogLine(1, 0, 0, "stdout", "\r50%" * 3_000_000)
    control = RefusesLargeBodies()
    agent = Agent(control, Prints([huge, LogLine(1, 0, 1, "stdout", "done")]))

    agent.step()

    stored = [line for batch in control.batches for line in batch]
    assert [(line.seq, line.text) for line in stored] == [(0, huge.text[:65_536]), (1, "done")]
    assert agent.unsent == []
