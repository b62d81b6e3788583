"""The cluster agent: one process per cluster, talking to the control plane over HTTP only."""
