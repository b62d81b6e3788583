"""Counts in the sentences people read agree with their nouns."""

from jobs.placement.words import counted


def test_one_is_singular_and_every_other_count_plural():
    assert [counted(n, "node") for n in (0, 1, 2)] == ["0 nodes", "1 node", "2 nodes"]


def test_an_irregular_plural_is_given():
    assert counted(3, "child", "children") == "3 children"
