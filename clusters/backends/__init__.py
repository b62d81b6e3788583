"""Execution backends: how a cluster agent turns an attempt into processes or pods."""
