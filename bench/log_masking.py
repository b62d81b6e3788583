"""Benchmark: the agents' log API storing lines of jobs that name secrets, whose values it
writes *** (quotas.secret_masking.masks), beside lines of jobs that name none.

    python bench/log_masking.py [--attempts 500] [--lines 5000] [--repeat 9]

In a fresh database (`mlsched_bench_log_masking` on DATABASE_URL's server, default local
PostgreSQL): one cluster running `--attempts` one-GPU jobs (bench/heartbeat.py's), the second
half of them naming three secrets of their tenant. Two kinds of post of `--lines` new lines
spread over half the attempts are timed through the agent API, `--repeat` times each after
one warm-up, alternately: lines of the jobs that name no secret, and lines of the jobs that
name three (one line in ten holding a value). Prints the median milliseconds and the queries
of each, their ratio, and the median milliseconds of the masking alone (`secret_masking.mask`
with what `masks` gives), which the posts' times are too noisy to show: on the lines of one
post, on as many lines of unrelated base64 wrapped at 76 columns, whose ends are looked up
among the values' base64 pieces, and on as many lines of an `xxd` dump of unrelated bytes, each
read back into its bytes and looked up.
"""

import argparse
import base64
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fresh_db  # noqa: E402

DATABASE = "mlsched_bench_log_masking"
fresh_db.use(DATABASE)

SECRETS = {"HF_TOKEN": "hf_" + "a" * 37, "WANDB_API_KEY": "b" * 40, "S3_SECRET": "c" * 40}


def body(attempt_ids: list[int], lines: int, seq: int) -> str:
    """`lines` new lines spread over the attempts, numbered from `seq`; one in ten holds the
    first secret's value."""
    rows = []
    for n in range(lines):
        text = f"step {n} loss 0.{n % 1000:03d} lr 3e-4 throughput 1234.5 samples/s"
        if n % 10 == 0:
            text += f" token={SECRETS['HF_TOKEN']}"
        attempt, row = attempt_ids[n % len(attempt_ids)], seq + n // len(attempt_ids)
        rows.append({"attempt_id": attempt, "rank": 0, "seq": row, "stream": "stdout",
                     "text": text})  # fmt: skip
    return json.dumps({"lines": rows})


def xxd_line(n: int) -> str:
    """Line ``n`` of `xxd`'s dump of bytes that hold no secret."""
    data = bytes((n * 16 + i) * 7 % 256 for i in range(16))
    groups = " ".join(data[i : i + 2].hex() for i in range(0, 16, 2))
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in data)
    return f"{n * 16:08x}: {groups}  {text}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attempts", type=int, default=500)
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    fresh_db.create(DATABASE)
    from heartbeat import build

    cluster, token, attempt_ids = build(args.attempts)
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from jobs.models import Attempt, Job, LogChunk
    from quotas import secret_masking, tenant_secrets
    from quotas.models import Tenant

    tenant = Tenant.objects.get()
    for name, value in SECRETS.items():
        tenant_secrets.put(tenant, name, value)
    half = len(attempt_ids) // 2
    plain, named = attempt_ids[:half], attempt_ids[half:]
    jobs = Attempt.objects.filter(pk__in=named).values("job_id")
    Job.objects.filter(pk__in=jobs).update(secrets=list(SECRETS))
    settings.ALLOWED_HOSTS = ["*"]
    client, url = Client(), f"/api/v1/agent/{cluster.name}/logs/"
    seqs = itertools.count(0, args.lines)

    def post(ids) -> tuple[float, int]:
        payload = body(ids, args.lines, next(seqs))
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            answer = client.post(url, payload, content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Agent {token}")  # fmt: skip
            took = (time.perf_counter() - started) * 1000
        assert answer.status_code == 200 and answer.json()["stored"] == args.lines, answer.content
        return took, len(captured)

    post(plain), post(named)  # warm-up
    times: dict[str, list[float]] = {"no secret": [], "three secrets": []}
    queries = {}
    for _ in range(args.repeat):
        for kind, ids in (("no secret", plain), ("three secrets", named)):
            took, queries[kind] = post(ids)
            times[kind].append(took)
    masked = LogChunk.objects.filter(attempt_id__in=named, text__contains="token=***").count()
    leaked = LogChunk.objects.filter(text__contains=SECRETS["HF_TOKEN"], attempt_id__in=named)
    assert masked and not leaked.exists()
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    for kind, ms in medians.items():
        print(f"{args.lines} lines of jobs naming {kind}: {ms:.1f} ms, {queries[kind]} queries")
    print(f"ratio: {medians['three secrets'] / medians['no secret']:.2f}x")
    hidden = secret_masking.masks(named)
    lines = json.loads(body(named, args.lines, 0))["lines"]
    dump = base64.encodebytes(bytes(range(256)) * (args.lines * 57 // 256 + 1)).decode()
    texts = dump.splitlines()[: len(lines)]
    wrapped = [{**line, "text": text} for line, text in zip(lines, texts, strict=True)]
    dumped = [{**line, "text": xxd_line(n)} for n, line in enumerate(lines)]
    for kind, batch in (("log lines", lines), ("lines of unrelated base64", wrapped),
                        ("lines of an unrelated hex dump", dumped)):  # fmt: skip
        masking = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            for line in batch:
                secret_masking.mask(line["text"], hidden[line["attempt_id"]])
            masking.append((time.perf_counter() - started) * 1000)
        print(f"masking alone, {kind}: {statistics.median(masking):.2f} ms")
    texts, cut = hidden[named[0]]
    print(f"hidden an attempt: {len(texts)} texts, {sum(len(c.forms) for c in cut)} cut forms")


if __name__ == "__main__":
    main()
