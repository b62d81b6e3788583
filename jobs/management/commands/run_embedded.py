"""The embedded all-in-one server: the web portal, API, admin, scheduler, daily retention, the
budget alerts' check and the demo clusters' agents in one process."""

import fcntl
import logging
import os
import sys
import threading

from daphne.endpoints import build_endpoint_description_strings
from daphne.server import Server
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from clusters.management.commands.run_agent import build_agent
from clusters.models import Cluster
from jobs import scheduler
from jobs.management.commands.seed_demo import DEMO_CLUSTERS
from mlsched_site.asgi import application


class Command(BaseCommand):
    help = "Migrate, seed demo data on an empty database and serve mlsched in one process."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host, port, **options):
        logging.getLogger("daphne").setLevel(logging.WARNING)
        self.var_dir_lock = hold_var_dir()  # held until the process exits
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")
        stop = threading.Event()
        server = Server(
            application=application,
            endpoints=build_endpoint_description_strings(host=host, port=port),
            # Called once the port is bound: a server that cannot listen starts nothing.
            ready_callable=lambda: self.start(host, port, stop),
        )
        server.run()
        stop.set()
        if not server.listening_addresses:
            raise CommandError(
                f"Cannot listen on port {port} (in use, or not allowed): stop what listens "
                "there, or pick another (PORT=9000 make run)."
            )
        # A request in flight when the server stopped waits forever in its thread for the
        # stopped event loop, and the interpreter would wait for that thread at exit.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def start(self, host: str, port: int, stop: threading.Event) -> None:
        threading.Thread(
            target=scheduler.run_forever, args=(stop,), name="scheduler", daemon=True
        ).start()
        threading.Thread(
            target=scheduler.prune_forever, args=(stop,), name="prune", daemon=True
        ).start()
        threading.Thread(
            target=scheduler.alerts_forever, args=(stop,), name="alerts", daemon=True
        ).start()
        for name, _, inventory in DEMO_CLUSTERS:
            start_agent(name, inventory, f"http://{host}:{port}", stop)
        self.stdout.write(f"mlsched is serving on http://{host}:{port}/ (admin: /admin/)")
        self.stdout.write(
            f"Command line: curl -fo mlsched http://{host}:{port}/cli/mlsched.pyz && "
            "chmod +x mlsched && ./mlsched login"
        )
        self.stdout.flush()


def hold_var_dir():
    """Lock the var dir for this process's life: a second server on it would give the demo
    clusters new agent tokens, and the first one's agents would be refused from then on."""
    settings.VAR_DIR.mkdir(parents=True, exist_ok=True)  # with DATABASE_URL, nothing made it
    lock = (settings.VAR_DIR / "run_embedded.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise CommandError(
            f"Another mlsched server is running on {settings.VAR_DIR}: stop it first, or "
            "give this one a folder of its own (MLSCHED_VAR_DIR)."
        ) from None
    return lock


def start_agent(cluster: str, inventory: str, url: str, stop: threading.Event) -> None:
    """A local agent for a demo cluster, in a thread, talking HTTP to this very server."""
    found = Cluster.objects.filter(name=cluster, backend=Cluster.Backend.LOCAL).first()
    if found is None:
        return
    agent = build_agent(cluster, url, found.rotate_token(), inventory)
    threading.Thread(
        target=agent.run_forever, args=(stop,), name=f"agent-{cluster}", daemon=True
    ).start()
