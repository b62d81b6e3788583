"""The Celery app: the broker is Redis (REDIS_URL); tasks live in the apps' tasks.py."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlsched_site.settings")

app = Celery("mlsched")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
