"""docs/guide.md, the users' guide, stays true to the product.

- Every ```yaml block that is a job (it has `family:`) is read as `mlsched submit` reads a file
  and sent as a test-only submission (`POST /api/v1/jobs/test/`) by one who may submit to the
  team it names (`alpha`: Bob, a member; `gamma`: Charlie, its owner), in a world holding what
  the examples use: nodes of the GPU types and the rack topology they name, the priority
  classes `normal` and `low`, alpha's secrets and data volumes. It must be accepted (200), and
  must not be told it can never run there. Job ids in a `depends_on` (`1234`: "your training
  job's id") are placeholders: each distinct id is replaced by a queued job of that team made
  for the test.
- Every `mlsched ...` command line of the ```sh blocks (also `./mlsched`, and one inside `$(...)`
  or after a pipe) is parsed by the CLI's own parser (`jobs.cli.main.build_parser()`). A shell
  variable in such a line (`"$train"`) is the one kind of placeholder: it stands for a job id
  and is read as 1. A redirection (`> job.yaml`) and what follows it are left out. The files
  `mlsched submit` names must be job files the guide shows (each begins with `# NAME.yaml`).
- Every `MLSCHED_...` variable the guide names is in the project's code (its .py files outside
  the tests); `MLSCHED_VOLUME_<NAME>` stands for the variable of a volume the job files mount.
- Its job files give only fields a submission has (the API would ignore another). The worker
  variables its table lists are those a worker is given; the reason codes its table lists
  exist, each with the sentence the code gives it; each path its prose writes in backticks from
  `/` is a portal or API path that resolves (paths inside a job's containers are written in its
  code blocks alone); each `mlsched COMMAND` its prose names is a command.
"""

import re
import shlex
from pathlib import Path

import pytest
import yaml
from django.urls import Resolver404, resolve
from rest_framework.test import APIClient

from clusters.backends.base import AttemptSpec, WorkerSpec, volume_variable, worker_env
from jobs import reasons
from jobs.cli.main import build_parser
from jobs.cli.written import job_description
from jobs.serializers import SubmitSerializer
from quotas import tenant_secrets
from quotas.models import Tenant
from tests.factories import (
    JobFactory,
    NodeFactory,
    PriorityClassFactory,
    TenantVolumeFactory,
)

ROOT = Path(__file__).resolve().parent.parent
TEXT = (ROOT / "docs" / "guide.md").read_text()

# Who submits a team's examples: a member of it, as the conftest's trio has them.
MEMBERS = {"alpha": "bob", "gamma": "charlie"}

# Reasons that say a job could never run as it is: an example told one of them is wrong (or
# the world below lacks what it needs).
NEVER = {
    "no_such_gpu_type",
    "worker_too_large",
    "topology_too_small",
    "no_node_with_features",
    "no_node_to_itself",
    "no_matching_cluster",
    "gpu_sharing_not_allowed",
    "invalid_request",
    "agent_release",
}


def blocks(language: str) -> list[str]:
    """The guide's fenced blocks of a language, each its text."""
    fence = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
    return [body for lang, body in fence.findall(TEXT) if lang == language]


def section(heading: str) -> str:
    """The text under a heading of the guide, up to the next one (its headings below the title
    are all ## or ###; a code block's comment may start a line with "# ")."""
    start = TEXT.index(f"\n{heading}\n")
    end = TEXT.find("\n##", start + len(heading) + 2)
    return TEXT[start : end if end != -1 else None]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the markdown tables in a text, each its cells."""
    rows = [line.strip().strip("|").split("|") for line in text.splitlines()]
    rows = [[cell.strip() for cell in row] for row in rows if len(row) > 1]
    return [row for row in rows if not set(row[0]) <= set("-: ")][1:]  # less the header


def job_files() -> list[tuple[str, dict]]:
    """The guide's job files: (the name its first comment gives it, the job as `submit` reads
    it)."""
    found = []
    for body in blocks("yaml"):
        job = job_description(body)
        if isinstance(job, dict) and "family" in job:
            named = re.match(r"# (\S+\.yaml)\n", body)
            found.append((named[1] if named else "", job))
    return found


JOBS = job_files()


def test_the_guide_shows_a_job_file_of_every_family():
    families = {job["family"] for _, job in JOBS}

    assert families == {"training", "batch_inference", "evaluation"} and len(JOBS) >= 8
    fields = set(SubmitSerializer().fields)  # the API ignores a field it does not know
    assert {name: sorted(set(job) - fields) for name, job in JOBS if set(job) - fields} == {}
    assert all(name for name, _ in JOBS), "each job file begins with a '# NAME.yaml' comment"
    assert all(isinstance(yaml.safe_load(body), dict) for body in blocks("yaml"))


@pytest.fixture
def world(alpha, east, bob, charlie):
    """What the examples use: H100 nodes in two racks, A100 nodes, T4s small jobs may share,
    the classes they name, alpha's secrets and data volumes."""
    PriorityClassFactory(name="normal", value=0)
    PriorityClassFactory(name="low", value=-10)
    for rack in ("r1", "r1", "r2", "r2"):
        NodeFactory(cluster=east, gpu_type="H100", gpu_count=8, topology={"rack": rack})
    NodeFactory.create_batch(4, cluster=east, gpu_type="A100", gpu_count=8)
    NodeFactory.create_batch(
        4, cluster=east, gpu_type="T4", gpu_count=1, gpu_shareable=True, cpu_milli=16_000,
        memory_mb=64_000,
    )  # fmt: skip
    for name in ("WANDB_API_KEY", "HF_TOKEN"):
        tenant_secrets.put(alpha, name, f"{name.lower()}-value")
    TenantVolumeFactory(tenant=alpha, name="imagenet")
    TenantVolumeFactory(tenant=alpha, name="scratch", writable=True)


def with_real_dependencies(job: dict, user) -> dict:
    """The job with each id its depends_on names replaced by a queued job of its team."""
    items = job.get("depends_on", [])
    ids = {item["id"] if isinstance(item, dict) else item for item in items}
    tenant = Tenant.objects.get(slug=job["tenant"])
    real = {pk: JobFactory(tenant=tenant, owner=user).pk for pk in sorted(ids)}
    made = [{**item, "id": real[item["id"]]} if isinstance(item, dict) else real[item]
            for item in items]  # fmt: skip
    return {**job, "depends_on": made} if items else job


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "job"), JOBS, ids=[name for name, _ in JOBS])
def test_each_job_file_is_accepted_by_a_test_only_submission(name, job, world, request):
    if job.get("tenant") not in MEMBERS:
        pytest.fail(f"{name}: name a team of the examples ({', '.join(MEMBERS)})")
    user = request.getfixturevalue(MEMBERS[job["tenant"]])
    client = APIClient()
    client.force_authenticate(user)

    answer = client.post("/api/v1/jobs/test/", with_real_dependencies(job, user), format="json")

    assert answer.status_code == 200, f"{name}: {answer.json()}"
    told = {trial["pending_reason"] for trial in answer.json()["jobs"]}
    assert not told & NEVER, f"{name}: {answer.json()['jobs'][0]}"


def commands_in(line: str) -> list[list[str]]:
    """The `mlsched` commands of a shell line, each its arguments after `mlsched`."""
    found = []
    line = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "1", line.replace("$(", " ; "))
    for segment in re.split(r"&&|\|\||[;|()]", line):
        words = shlex.split(segment, comments=True)
        if words and words[0] in ("mlsched", "./mlsched"):
            args = words[1:]
            redirected = [i for i, word in enumerate(args) if re.match(r"\d?[<>]", word)]
            found.append(args[: redirected[0]] if redirected else args)
    return found


COMMANDS = [
    args
    for body in blocks("sh")
    for line in body.replace("\\\n", " ").splitlines()
    for args in commands_in(line)
]


def test_the_guide_shows_command_lines():
    assert len(COMMANDS) > 40


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(args) for args in COMMANDS])
def test_each_command_line_parses(args, capsys):
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"mlsched {shlex.join(args)}: {capsys.readouterr().err}")
    # What main() refuses after parsing.
    assert not (parsed.command == "submit" and parsed.wait and parsed.test_only)


def test_the_files_submitted_are_job_files_of_the_guide():
    shown = {name for name, _ in JOBS}
    submitted = {args[1] for args in COMMANDS if args[0] == "submit" and args[1] != "-"}

    assert submitted and submitted <= shown, sorted(submitted - shown)


def test_each_command_the_prose_names_is_a_command():
    (subcommands,) = [
        action.choices for action in build_parser()._actions if hasattr(action, "choices")
        and isinstance(action.choices, dict)
    ]  # fmt: skip
    named = set(re.findall(r"`(?:\./)?mlsched ([a-z][a-z-]*)", TEXT))

    assert len(named) > 20 and sorted(named - set(subcommands)) == []


def project_code() -> str:
    """The text of the project's .py files, the tests' and the virtualenv's aside."""
    skipped = {".venv", "tests", "node_modules", "var", ".git"}
    tops = [path for path in ROOT.iterdir() if path.name not in skipped]
    files = [path for top in tops for path in ([top] if top.is_file() else top.rglob("*.py"))]
    return "\n".join(path.read_text(errors="replace") for path in files if path.suffix == ".py")


def test_every_mlsched_variable_the_guide_names_is_in_the_code():
    code = project_code()
    named = set(re.findall(r"MLSCHED_[A-Z0-9_]+", TEXT))
    per_volume = {name for name in named if name.startswith("MLSCHED_VOLUME_")}
    mounted = {volume_variable(v["name"]) for _, job in JOBS for v in job.get("volumes", [])}

    missing = [
        name for name in sorted(named - per_volume)
        if not re.search(rf"(?<![A-Z0-9_]){name}(?![A-Z0-9_])", code)
    ]  # fmt: skip

    assert len(named) > 15 and missing == []
    assert "MLSCHED_VOLUME_" in code  # the per-volume variables' prefix (MLSCHED_VOLUME_<NAME>)
    assert per_volume - {"MLSCHED_VOLUME_"} <= mounted


def test_the_worker_variables_listed_are_those_a_worker_is_given():
    listed = {
        name
        for row in table_rows(section("### What each worker is told"))
        for name in re.findall(r"`([A-Z_]+)`", row[0])
    }
    spec = AttemptSpec(
        attempt_id=7, job_id=12, number=2, tenant="alpha", name="n", image="i", command=("x",),
        env={}, workers=(WorkerSpec(0, "a", (0,)), WorkerSpec(1, "b", (0,))),
        checkpoint_dir="c", max_runtime_s=3600, shards=2,
    )  # fmt: skip
    given = set(worker_env(spec, spec.workers[0], "10.0.0.1", "/checkpoints/c"))
    backends = ROOT / "clusters" / "backends"
    added = {
        name
        for path in (backends / "local.py", backends / "k8s_specs.py")
        for name in re.findall(r'env\["(MLSCHED_[A-Z_]+)"\] =', path.read_text())
    }  # each backend's own, beside worker_env's

    assert len(listed) > 20 and sorted(listed - given - added) == []


def test_the_reason_codes_listed_exist_with_their_sentences():
    rows = table_rows(section("### Why a job waits"))
    listed = {row[0].strip("`"): row[1] for row in rows}

    assert len(listed) > 15
    assert sorted(set(listed) - reasons.CODES) == []
    assert {code: said for code, said in listed.items() if said != reasons.meaning(code)} == {}


def test_the_portal_and_api_paths_named_resolve():
    # The prose writes paths inside a job's containers in its code blocks alone.
    paths = {re.split(r"[?#]", token)[0] for token in re.findall(r"`(/[^`\s]*)`", TEXT)}

    unresolved = []
    for path in sorted(paths):
        try:
            resolve(re.sub(r"<[a-z_]+>", "1", path))
        except Resolver404:
            unresolved.append(path)

    assert len(paths) > 10 and unresolved == []
