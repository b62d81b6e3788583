"""Counts in sentences, for people: "1 job", "3 jobs", never "job(s)"."""


def counted(n: int, noun: str, plural: str = "") -> str:
    """`n` with `noun` agreeing with it ("1 node", "0 nodes"; `plural` when not noun + "s")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
