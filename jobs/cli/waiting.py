"""`wait ID ...` and `submit FILE --wait`: block until jobs have ended and exit as they did, as
Slurm's `sbatch --wait` and `kubectl wait` let a pipeline run jobs (a sweep's) as one of its
steps."""

import sys
import time

from jobs.cli.client import TERMINAL, Api, Unavailable, show

FIRST_POLL_S = 1.0  # a short job's end is seen within a second or two...
LONGEST_POLL_S = 10.0  # ...a long one's within ten seconds, six reads a minute
PATIENCE_S = 300.0  # how long the server may not answer (a restart) before waiting gives up
TIMED_OUT = 124  # the exit status of a wait that ran out of time, as timeout(1)'s
IDS_A_READ = 100  # the jobs one list read names (the API's most, a page)


def wait(api: Api, args) -> None:
    raise SystemExit(wait_for(api, args.ids, args.timeout))


def wait_for(api: Api, job_ids: list[int], timeout: float | None) -> int:
    """Read the jobs until each has ended (a batch: every shard), saying each change of their
    states on standard error; print how each ended (one job: its end alone; several: a line
    each, after its id) and return the exit status: one job's as `ended` gives it; several
    jobs' 0 if all succeeded, else 1; TIMED_OUT if one had not ended `timeout` seconds from
    now."""
    start, ids = time.monotonic(), list(dict.fromkeys(job_ids))
    poll, said, states, statuses = FIRST_POLL_S, {}, {}, {}
    while True:
        for job_id, job in read_all(api, [pk for pk in ids if pk not in statuses]):
            states[job_id] = state = job.get("batch_state", job["state"])
            saying = f"job {job_id} {state}"
            if state == "queued" and job["pending_reason"] and "batch_state" not in job:
                saying += f": waiting as {job['pending_reason']}"
            if saying != said.get(job_id):
                show(saying, sys.stderr)
                said[job_id] = saying
            if state in TERMINAL:
                statuses[job_id] = ended(job, state, f"{job_id} " if len(ids) > 1 else "")
        if len(statuses) == len(ids):
            return statuses[ids[0]] if len(ids) == 1 else int(any(statuses.values()))
        left = None if timeout is None else timeout - (time.monotonic() - start)
        if left is not None and left <= 0:
            for job_id in (pk for pk in ids if pk not in statuses):
                show(f"job {job_id} still {states[job_id]} after {timeout:g} s", sys.stderr)
            return TIMED_OUT
        time.sleep(poll if left is None else min(poll, left))
        poll = min(poll * 1.5, LONGEST_POLL_S)


def read_all(api: Api, job_ids: list[int]):
    """Each job and its id, in the order asked: several read by the list, a page (100) a
    request, each batch with its shards counted; one the folded list leaves out (a batch's
    later shard) read alone."""
    found: dict[int, dict] = {}
    if len(job_ids) > 1:
        for first in range(0, len(job_ids), IDS_A_READ):
            asked = ",".join(map(str, job_ids[first : first + IDS_A_READ]))
            page = patiently(api, "GET", "jobs/", params={"id": asked, "fold": 1})
            found.update((job["id"], job) for job in page["jobs"])
    for job_id in job_ids:
        yield job_id, found[job_id] if job_id in found else read(api, job_id)


def read(api: Api, job_id: int) -> dict:
    return patiently(api, "GET", f"jobs/{job_id}/")


def patiently(api: Api, method: str, path: str, **kwargs) -> dict:
    """Api.call, asked again while the server does not answer or answers 5xx, up to
    PATIENCE_S: a wait of hours (`wait`, `logs -f`) outlives a restart of the web app."""
    gone_since, pause = None, FIRST_POLL_S
    while True:
        try:
            return api.call(method, path, **kwargs)
        except Unavailable as error:
            now = time.monotonic()
            gone_since = gone_since or now
            if now - gone_since >= PATIENCE_S:
                raise
            show(f"{error}: asking again", sys.stderr)
            time.sleep(min(pause, PATIENCE_S - (now - gone_since)))
            pause = min(pause * 2, LONGEST_POLL_S)


def ended(job: dict, state: str, which: str = "") -> int:
    """Print how the job ended (why, for a failed or canceled one), after `which` (its id,
    when several are waited for); its exit status."""
    reason = job.get("end_reason") if state in ("failed", "canceled") else ""
    # A batch's end_reason is its first shard's: its state alone is the batch's.
    show(which + (f"{state}: {reason}" if reason and "batch_state" not in job else state))
    if state == "succeeded":
        return 0
    attempts = sorted(job["attempts"], key=lambda attempt: attempt["number"])
    code = attempts[-1]["exit_code"] if attempts and "batch_state" not in job else None
    return code if state == "failed" and code is not None and 1 <= code <= 255 else 1
