"""The features a Kubernetes node offers (what a job may require, Slurm's node Features): the
labels `feature.mlsched.io/NAME: "true"` it carries, as node-feature-discovery labels its own,
read through the real client from the test server."""

from clusters.management.commands.run_agent import kubernetes_backend
from tests.k8s.test_run_agent import KUBECONFIG


def test_a_node_offers_the_features_its_labels_say_true(kube, tmp_path):
    kube.add_node("ib-1", gpus=8, labels={
        "feature.mlsched.io/nvme": "true", "feature.mlsched.io/ib": "true",
        "feature.mlsched.io/sxm": "false",  # said not offered
        "feature.mlsched.io/Bad_Name": "true",  # no name a job could require
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",  # another prefix
    })  # fmt: skip
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG % kube.url)
    backend = kubernetes_backend("east", str(config), "ckpt", None)
    try:
        offered = {node.name: node.features for node in backend.inventory()}
    finally:
        backend.close()

    assert offered == {"gpu-a": (), "gpu-b": (), "ib-1": ("ib", "nvme")}
