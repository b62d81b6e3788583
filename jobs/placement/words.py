"""Counts in sentences, for people ("1 job", "3 jobs", never "job(s)"), and where a worker ran."""


def counted(n: int, noun: str, plural: str = "") -> str:
    """`n` with `noun` agreeing with it ("1 node", "0 nodes"; `plural` when not noun + "s")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def where_on(node: dict) -> str:
    """One node of Attempt.nodes() (an attempt's `nodes` in the API), for people: its name
    and what it held there: "gpu-a (GPUs 0, 1)", "t4-3 (GPU 0, 250m)" (a share of a GPU)."""
    gpus = node["gpus"]
    if not gpus:
        return node["node"]
    said = ", ".join(map(str, gpus))
    each = " each" if len(gpus) > 1 else ""
    share = f", {node['gpu_milli']}m{each}" if node["gpu_milli"] < 1000 else ""
    return f"{node['node']} (GPU{'s' if len(gpus) > 1 else ''} {said}{share})"
