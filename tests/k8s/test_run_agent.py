"""`run_agent --backend kubernetes`: the backend it builds from its options and a kubeconfig."""

from clusters.management.commands.run_agent import kubernetes_backend

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "%s"}}]
users: [{name: test, user: {token: t}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
"""


def test_the_agents_kubernetes_options_reach_the_backend(kube, tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG % kube.url)

    backend = kubernetes_backend(
        "east", str(config), "ckpt", None, not_ready_grace_s=45.0, isolate_namespaces=False
    )
    try:
        names = sorted(node.name for node in backend.inventory())
    finally:
        backend.close()

    assert names == ["gpu-a", "gpu-b"]  # it talks to the server the kubeconfig names
    assert (backend.not_ready_grace_s, backend.isolate_namespaces) == (45.0, False)
