"""cgroup v2 layout. This host's kernel runs cgroup v1 (the local backend's tests exercise it for
real); no v2 hierarchy can be mounted here, so the v2 files are checked in a directory laid out
like one."""

from clusters.backends import cgroups


def v2_root(tmp_path, controllers="cpuset cpu io memory pids"):
    (tmp_path / "cgroup.controllers").write_text(controllers)
    (tmp_path / "cgroup.subtree_control").write_text("")
    return tmp_path


def test_a_v2_group_gets_the_cpu_quota_and_memory_cap_of_its_request(tmp_path):
    root = v2_root(tmp_path)

    group = cgroups.create("/state/7/0", cpu_milli=2500, memory_mb=512, root=root)

    leaf = root / cgroups.PARENT / cgroups.leaf_name("/state/7/0")
    assert group == cgroups.Group(leaf, leaf, leaf / "memory.events")
    assert (leaf / "cpu.max").read_text() == "250000 100000"
    assert (leaf / "memory.max").read_text() == str(512 * 1024 * 1024)
    # Both levels above the leaf hand the controllers down.
    assert (root / "cgroup.subtree_control").read_text() == "+cpu +memory"
    assert (root / cgroups.PARENT / "cgroup.subtree_control").read_text() == "+cpu +memory"


def test_a_v2_group_counts_oom_kills_from_memory_events(tmp_path):
    group = cgroups.create("w", 1000, 64, root=v2_root(tmp_path))
    group.events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")

    assert group.oom_kills() == 1


def test_a_root_without_the_cpu_and_memory_controllers_gives_no_group(tmp_path):
    assert cgroups.create("w", 1000, 64, root=v2_root(tmp_path, "cpuset io pids")) is None
