"""The scheduler's Celery task: what every message that asks for a turn carries."""

from mlsched_site.celery import app


def test_a_turn_expires_unrun_after_5_s_however_it_is_sent(monkeypatch):
    app.loader.import_default_modules()  # as beat and the worker do on start: finds jobs.tasks
    app.finalize(auto=True)  # registers them, as beat's first look at app.tasks does
    sent = []
    monkeypatch.setattr(app.amqp, "send_task_message", lambda *args, **kw: sent.append(args))

    app.send_task("jobs.tasks.schedule")  # as beat sends it, by name

    (message,) = [args[2] for args in sent]
    assert message.headers["expires"] is not None
