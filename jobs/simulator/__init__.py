"""Trace simulator: replays public GPU-cluster traces through the placement scorers.

Pure Python (numpy, matplotlib for the plots); no Django. ``python -m jobs.simulator`` and
``manage.py simulate`` both run :func:`jobs.simulator.cli.main`.
"""
