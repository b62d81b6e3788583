"""Settings for mlsched, read from the environment.

DATABASE_URL  PostgreSQL in production and in the tests. Unset: a SQLite file with IMMEDIATE
              transactions (the embedded single-process mode).
REDIS_URL     Celery broker, Channels layer and (in database MLSCHED_THROTTLE_REDIS_DB of the same
              server, 1 by default) the API rate counters. Unset: in-memory channel layer,
              in-process scheduling and per-process rate counters.
SECRET_KEY, DEBUG, ALLOWED_HOSTS as usual.
"""

import ipaddress
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MLSCHED_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


DEBUG = env_bool("DEBUG", False)
# Error pages and mails hide every setting that may hold a service's password.
DEFAULT_EXCEPTION_REPORTER_FILTER = "mlsched_site.reporting.SettingsFilter"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1").split(",") if h]
# Origins the browser may post from, as it names them (https://mlsched.example.com): needed
# behind a proxy that terminates TLS, where the browser's https origin is not this server's.
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]
# Behind a proxy that terminates TLS and sets X-Forwarded-Proto: requests count as https, the
# session and CSRF cookies are sent over https only, and browsers are told to keep to https.
if env_bool("MLSCHED_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("MLSCHED_HSTS_SECONDS", "31536000"))

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "guardian",
    "channels",
    "django_celery_beat",
    "quotas",
    "clusters",
    "jobs",
]

MIDDLEWARE = [
    "mlsched_site.middleware.date_header",
    "mlsched_site.middleware.release_header",
    "mlsched_site.middleware.content_security_policy",
    "mlsched_site.middleware.health_before_host_check",
    "django.middleware.security.SecurityMiddleware",
    "mlsched_site.middleware.refuse_nul",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "quotas.proxy_auth.signed_in_by_proxy",
    "quotas.oidc_sessions.kept_in_step",
    "jobs.access.read_once_per_request",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "mlsched_site.errors.DatabaseUnavailable",
]

ROOT_URLCONF = "mlsched_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "quotas.accounts.mail",
            ],
        },
    },
]

WSGI_APPLICATION = "mlsched_site.wsgi.application"
ASGI_APPLICATION = "mlsched_site.asgi.application"


DATABASE_CONNECT_TIMEOUT_S = 5


def database_url_read(url: str) -> dict:
    """DATABASE_URL as Django's settings, several hosts included, which dj-database-url cannot
    read: `postgresql://user:pass@primary:5432,standby:5432/mlsched?target_session_attrs=
    read-write`, libpq's way to name a primary and its standbys. libpq tries them in turn and
    keeps the first that answers (with `target_session_attrs=read-write`, the first that takes
    writes: after a failover, the promoted standby). No persistent connections: under ASGI
    each request runs on a thread of its own, and connections kept behind them would pile up to
    PostgreSQL's limit (Django's advice)."""
    parts = urlsplit(url)
    user, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return dj_database_url.parse(url, conn_max_age=0)
    db = dj_database_url.parse(
        urlunsplit(parts._replace(netloc=f"{user}{at}hosts")), conn_max_age=0
    )
    pairs = [host_and_port(one) for one in hosts.split(",")]
    db["HOST"] = ",".join(host for host, _ in pairs)
    db["PORT"] = ",".join(port or "5432" for _, port in pairs)
    return db


def host_and_port(written: str) -> tuple[str, str]:
    """One host of a URL's list, `host`, `host:port`, `[v6 address]` or `[v6 address]:port`."""
    if written.startswith("["):
        host, _, rest = written[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = written.partition(":")
    return unquote(host), port


def database_settings() -> dict:
    url = os.environ.get("DATABASE_URL")
    if url:
        db = database_url_read(url)
        # A database host that drops packets (a failover under way, a network cut) would hold
        # each request's connection attempt for the kernel's TCP retries, about two minutes:
        # it fails in seconds instead, and the request answers 503. A URL's own wins.
        db.setdefault("OPTIONS", {}).setdefault("connect_timeout", DATABASE_CONNECT_TIMEOUT_S)
        # pytest-django and Channels' live server need an explicit test database name.
        db["TEST"] = {"NAME": f"test_{db['NAME']}"}
        return db
    VAR_DIR.mkdir(parents=True, exist_ok=True)  # the embedded mode keeps its files there
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "mlsched.sqlite3",
        # IMMEDIATE takes the write lock at BEGIN, so two writers queue instead of failing
        # with "database is locked" half-way through a transaction.
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        "TEST": {"NAME": VAR_DIR / "test-mlsched.sqlite3"},
    }


DATABASES = {"default": database_settings()}
EMBEDDED = DATABASES["default"]["ENGINE"].endswith("sqlite3")
if not SECRET_KEY:
    if not (EMBEDDED or DEBUG):
        # A known key signs sessions anyone could forge: never in a real deployment.
        raise ImproperlyConfigured("SECRET_KEY must be set when DATABASE_URL is (or set DEBUG=1)")
    SECRET_KEY = "mlsched-insecure-development-key"

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py reads with a 5 s socket timeout by default, the same as the layer's
            # blocking receive: a quiet socket would die of it. Give the read room.
            # A Redis that does not answer at all gives up in a second, not a TCP timeout.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30, "socket_connect_timeout": 1}]
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "mlsched_site.layers.ThreadSafeInMemoryChannelLayer"}}

# Request bodies up to 8 MiB (Django's default is 2.5 MiB): an agent's heartbeat lists every
# worker of its cluster, about 150 bytes each; its log batches are kept near 1 MiB.
DATA_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024


def redis_database_url(url: str, db: int) -> str:
    """`url` (redis://, rediss:// or unix://), credentials and options kept, naming database
    `db` of the same server. A `db` in the query string would win over the path: it goes."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"]
    if parts.scheme == "unix":  # the path is the socket's: the database is a query option
        return f"unix://{parts.netloc}{parts.path}?{urlencode([*query, ('db', db)])}"
    return urlunsplit(parts._replace(path=f"/{db}", query=urlencode(query)))


# The API's rate counters must be shared by every web process: Redis when there is one, on
# REDIS_URL's server but in a database of their own (MLSCHED_THROTTLE_REDIS_DB), so that
# clearing them touches neither the broker's queues nor the channel layer. The platform-wide
# metrics (MLSCHED_METRICS_CACHE_S) are shared the same way ("shared", in that database too,
# under another key prefix: clearing either cache empties the database, both at once): one web
# process computes them for all. The default cache is each process's own memory.
MLSCHED_THROTTLE_REDIS_DB = int(os.environ.get("MLSCHED_THROTTLE_REDIS_DB", "1"))


def redis_cache(prefix: str) -> dict:
    if not REDIS_URL:
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": prefix}
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": redis_database_url(REDIS_URL, MLSCHED_THROTTLE_REDIS_DB),
        "KEY_PREFIX": prefix,
        # A request waits at most about a second for Redis, then goes on without it.
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }


CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": redis_cache("mlsched-rate"),
    "shared": redis_cache("mlsched-shared"),
}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE = {
    "placement-cycle": {
        "task": "jobs.tasks.schedule",
        "schedule": float(os.environ.get("MLSCHED_TICK_S", "1.0")),
        # Its expiry is the task's own (jobs/tasks.py): beat's database scheduler drops this
        # entry's options, and kicks need it too.
    },
    # Retention (jobs.retention): old log lines, released allocations, finished jobs, sign-ins
    # and the platform's history, daily. MLSCHED_LOG_RETENTION_DAYS (30),
    # MLSCHED_JOB_RETENTION_DAYS (90), MLSCHED_SIGN_IN_RETENTION_DAYS (365) and
    # MLSCHED_HISTORY_RETENTION_DAYS (730); 0 keeps forever.
    "prune": {"task": "jobs.tasks.prune", "schedule": 24 * 3600.0},
    # GPU-hour budget and spend alerts (jobs.budget_alerts): one query a minute while no tenant
    # has both a budget (or a spend alert) and someone to tell.
    "budget-alerts": {"task": "jobs.tasks.alert_budgets", "schedule": 60.0},
    # Time-limit warnings (jobs.time_limit_alerts): one query a minute.
    "time-limit-warnings": {"task": "jobs.tasks.warn_time_limits", "schedule": 60.0},
}

# Scheduler
MLSCHED_SINGLE_FLIGHT = env_bool("MLSCHED_SINGLE_FLIGHT", True)
# How long the scheduler's database session may sit idle while it holds the cycle lock before
# PostgreSQL (14 or later) ends it: a frozen scheduler then lets another one take over.
MLSCHED_CYCLE_STALL_S = int(os.environ.get("MLSCHED_CYCLE_STALL_S", "120"))
MLSCHED_STOP_GRACE_S = int(os.environ.get("MLSCHED_STOP_GRACE_S", "30"))
# Fair share counts a tenant's recent use beside what it holds now: an average of what its
# running work held, each moment weighing half as much every this many hours (Slurm's
# PriorityDecayHalfLife). 0: what it holds now alone.
MLSCHED_FAIR_SHARE_HALF_LIFE_H = float(os.environ.get("MLSCHED_FAIR_SHARE_HALF_LIFE_H", "24"))
# An agent silent this long makes its cluster unhealthy (no new placements); silent for the
# grace period too, its attempts are declared lost and retried elsewhere (while some other
# cluster's agent still reports). Long enough for an agent to be rescheduled and restarted:
# its workers may still run meanwhile, and a job retried too early would run twice.
MLSCHED_AGENT_TIMEOUT_S = int(os.environ.get("MLSCHED_AGENT_TIMEOUT_S", "15"))
MLSCHED_AGENT_LOST_GRACE_S = int(os.environ.get("MLSCHED_AGENT_LOST_GRACE_S", "300"))
# An attempt not all of whose workers run this long after placement is stopped and retried
# (a gang rank that never came up, a pod that cannot start).
MLSCHED_START_TIMEOUT_S = int(os.environ.get("MLSCHED_START_TIMEOUT_S", "300"))
# An attempt still running this long after its runtime limit and the stop grace is stopped by
# the control plane, as a timeout: the backstop for an agent that does not enforce the limit.
# Agents enforce it first (SIGTERM at the limit, SIGKILL a stop grace later), with the exact exit.
MLSCHED_RUNTIME_LIMIT_SLACK_S = int(os.environ.get("MLSCHED_RUNTIME_LIMIT_SLACK_S", "300"))
# First retry of an infrastructure failure waits this long; each further retry doubles it.
MLSCHED_RETRY_BACKOFF_S = float(os.environ.get("MLSCHED_RETRY_BACKOFF_S", "10"))
# A job is queued again this many times, no retry used, for its node on an interruptible
# cluster (taken back); past them, each such end uses a retry, as an infrastructure failure does
# (a job whose own run brings its node down cannot requeue forever).
MLSCHED_INTERRUPTION_REQUEUES = int(os.environ.get("MLSCHED_INTERRUPTION_REQUEUES", "10"))
# A node where attempts of this many distinct jobs ended for a node's fault within the window
# is cordoned (jobs.quarantine); 0 turns quarantine off.
MLSCHED_QUARANTINE_JOBS = int(os.environ.get("MLSCHED_QUARANTINE_JOBS", "3"))
MLSCHED_QUARANTINE_WINDOW_S = int(os.environ.get("MLSCHED_QUARANTINE_WINDOW_S", "3600"))
# Retention (jobs/retention.py), in days; 0 keeps forever: log lines of ended attempts and
# released allocations, then finished jobs with their attempts and events.
MLSCHED_LOG_RETENTION_DAYS = int(os.environ.get("MLSCHED_LOG_RETENTION_DAYS", "30"))
MLSCHED_JOB_RETENTION_DAYS = int(os.environ.get("MLSCHED_JOB_RETENTION_DAYS", "90"))
# Sign-ins and failed attempts (quotas/sign_ins.py), kept for security audits.
MLSCHED_SIGN_IN_RETENTION_DAYS = int(os.environ.get("MLSCHED_SIGN_IN_RETENTION_DAYS", "365"))
# The platform's history (the admin's LogEntry, quotas/history.py), an audit trail: two years.
MLSCHED_HISTORY_RETENTION_DAYS = int(os.environ.get("MLSCHED_HISTORY_RETENTION_DAYS", "730"))
# Bearer token for Prometheus scrapes of /metrics (superusers' sessions may read it too).
MLSCHED_METRICS_TOKEN = os.environ.get("MLSCHED_METRICS_TOKEN", "")
# The platform-wide figures of /metrics and the portal's overview (GPUs, idle GPUs, scheduler,
# agents) are computed at most once per this many seconds and shared by every reader through
# the "default" cache; 0 computes them at each request. Job and attempt figures are always
# current.
MLSCHED_METRICS_CACHE_S = int(os.environ.get("MLSCHED_METRICS_CACHE_S", "10"))
# The line the queued jobs stand in (their places and priority points: the job document's
# standing, GET /api/v1/queue/) is kept by the placement cycle at most once per this many
# seconds; 0 keeps it at every cycle.
MLSCHED_LINE_EVERY_S = int(os.environ.get("MLSCHED_LINE_EVERY_S", "5"))
# Requests per user to the users' API (429 past it; agents are not limited), and submissions
# per user on top of that. Django REST framework's "N/second|minute|hour|day" form.
MLSCHED_API_RATE = os.environ.get("MLSCHED_API_RATE", "1200/minute")
MLSCHED_SUBMIT_RATE = os.environ.get("MLSCHED_SUBMIT_RATE", "300/minute")
MLSCHED_TENANT_SUBMIT_RATE = os.environ.get("MLSCHED_TENANT_SUBMIT_RATE", "1200/minute")
# Output lines kept per worker of an attempt; later lines are dropped, with a note.
MLSCHED_LOG_MAX_LINES = int(os.environ.get("MLSCHED_LOG_MAX_LINES", "1000000"))
# Log lines a minute one tenant's workers may add together; the rest are dropped with a note.
MLSCHED_TENANT_LOG_RATE = int(os.environ.get("MLSCHED_TENANT_LOG_RATE", "600000"))
# Unset: every queued job is decided each cycle. A number: a cycle stops once that many jobs
# have had to wait (the rest wait as beyond_queue_depth; see Policy.queue_depth).
# A GPU job of a team under its fair share evicts preemptible work of its class or lower from a
# team over it, as far as that team keeps its fair share (jobs.placement.preemption): fair
# share then holds on a full platform too, not only in the queue's order. Off by default.
MLSCHED_FAIR_SHARE_PREEMPTION = os.environ.get("MLSCHED_FAIR_SHARE_PREEMPTION", "0") == "1"
# A running elastic training gang below its whole gang restarts larger (asked to stop with
# the grace period for a checkpoint, then started again with more workers) once it has run
# this many seconds, where no queued job waits for the room (jobs.placement.growth). Empty:
# gangs keep the size they started with.
MLSCHED_ELASTIC_GROW_AFTER_S = (
    float(os.environ.get("MLSCHED_ELASTIC_GROW_AFTER_S", "600"))
    if os.environ.get("MLSCHED_ELASTIC_GROW_AFTER_S", "600")
    else None
)
MLSCHED_QUEUE_DEPTH = (
    int(os.environ["MLSCHED_QUEUE_DEPTH"]) if os.environ.get("MLSCHED_QUEUE_DEPTH") else None
)
# Placements committed per transaction: larger is faster, smaller holds node locks shorter.
MLSCHED_COMMIT_BATCH = int(os.environ.get("MLSCHED_COMMIT_BATCH", "200"))
# The keys tenants' secrets are sealed with (quotas.vault), comma-separated: the first seals,
# every one opens, so a new key goes first and an old one stays until the secrets are sealed
# anew (`manage.py reseal_secrets`). Unset: a key derived from SECRET_KEY.
MLSCHED_SECRETS_KEYS = [k for k in os.environ.get("MLSCHED_SECRETS_KEYS", "").split(",") if k]
# The portal's address as its users reach it (https://mlsched.example.com): job-end
# notifications (jobs.notify) link to the job's page under it, budget alerts to the quota page.
# Unset: they carry no link.
MLSCHED_PUBLIC_URL = os.environ.get("MLSCHED_PUBLIC_URL", "")
# Failed logins of one account from one client address within 15 minutes after which its
# logins from there are refused until they end (quotas/logins.py); 0: never.
MLSCHED_LOGIN_FAILURES = int(os.environ.get("MLSCHED_LOGIN_FAILURES", "10"))
# Reverse proxies in front of the web app that each append the address they were reached from
# to X-Forwarded-For: the client's address is the one the outermost saw; 0: the peer's.
MLSCHED_PROXIES = int(os.environ.get("MLSCHED_PROXIES", "0"))
# The days the API token `mlsched login` gets (quotas/cli_logins.py) lasts: one of the portal's
# choices of a token's expiry (quotas.tokens.EXPIRY_DAYS, checked as the app starts).
_cli_days = os.environ.get("MLSCHED_CLI_LOGIN_TOKEN_DAYS", "") or "30"
if not _cli_days.isdigit():
    raise ImproperlyConfigured(
        f"MLSCHED_CLI_LOGIN_TOKEN_DAYS: {_cli_days!r} is no number of days (30, 90 or 365)"
    )
MLSCHED_CLI_LOGIN_TOKEN_DAYS = int(_cli_days)
# The currency of the rate card's prices and so of the usage reports' costs (quotas.Rate,
# jobs/costs.py), one for the platform: an ISO 4217 code (USD, EUR, JPY).
MLSCHED_CURRENCY = os.environ.get("MLSCHED_CURRENCY", "") or "USD"
if not re.fullmatch(r"[A-Z]{3}", MLSCHED_CURRENCY):
    raise ImproperlyConfigured(
        f"MLSCHED_CURRENCY: {MLSCHED_CURRENCY!r} is no ISO 4217 currency code: three capital "
        "letters, e.g. USD or EUR"
    )


def smtp_settings(url: str) -> tuple[str, int, str, str, bool, bool]:
    """Django's EMAIL_HOST, _PORT, _HOST_USER, _HOST_PASSWORD, _USE_TLS (STARTTLS) and
    _USE_SSL from MLSCHED_SMTP_URL: `smtp://` (plain), `smtp+starttls://` or `smtps://` (TLS
    from the start), a user and password if given, a port (25, 587, 465 by scheme if not)."""
    parts = urlsplit(url)
    schemes = {"smtp": (25, False, False), "smtp+starttls": (587, True, False),
               "smtps": (465, False, True)}  # fmt: skip
    if parts.scheme not in schemes or not parts.hostname:
        raise ImproperlyConfigured(
            "MLSCHED_SMTP_URL: smtp://, smtp+starttls:// or smtps:// and a host, e.g. "
            "smtp+starttls://user:password@mail.example.com:587"
        )
    port, starttls, tls = schemes[parts.scheme]
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    return parts.hostname, parts.port or port, user, password, starttls, tls


# The mail server that emails jobs' submitters what they asked to be told (`notify_email`,
# jobs.notify). Unset: no email is sent, and a job asking for it is refused.
MLSCHED_SMTP_URL = os.environ.get("MLSCHED_SMTP_URL", "")
if MLSCHED_SMTP_URL:
    (EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS,
     EMAIL_USE_SSL) = smtp_settings(MLSCHED_SMTP_URL)  # fmt: skip
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("MLSCHED_EMAIL_FROM", "mlsched@localhost")

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "quotas.proxy_auth.ProxyBackend",
    "quotas.oidc.OidcBackend",
    "guardian.backends.ObjectPermissionBackend",
]
# A password set by its user (its change, a reset) is at least 8 characters, not one of the
# 20,000 most common, not all digits, not like the username or email address.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in ("UserAttributeSimilarityValidator", "MinimumLengthValidator",
                 "CommonPasswordValidator", "NumericPasswordValidator")
]  # fmt: skip
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
# Single sign-on through an authenticating proxy (quotas/proxy_auth.py): the header it names
# the signed-in user in (X-Auth-Request-User), whether their first visit makes their account,
# the headers of their email address and of their groups (teams' member_groups), the
# networks its requests come from (any, unset), and where logging out goes (the proxy's
# sign-out, so that its own session ends too).
MLSCHED_AUTH_USER_HEADER = os.environ.get("MLSCHED_AUTH_USER_HEADER", "")
MLSCHED_AUTH_CREATES_USERS = env_bool("MLSCHED_AUTH_CREATES_USERS", True)
MLSCHED_AUTH_EMAIL_HEADER = os.environ.get("MLSCHED_AUTH_EMAIL_HEADER", "")
MLSCHED_AUTH_GROUPS_HEADER = os.environ.get("MLSCHED_AUTH_GROUPS_HEADER", "")
# The sign-on groups (the proxy's header's or the OpenID Connect groups claim's, with commas;
# SCIM's groups where MLSCHED_SCIM_TOKEN is set) whose users are platform admins
# (quotas.sign_on.admin_by); none, unset.
MLSCHED_AUTH_ADMIN_GROUPS = os.environ.get("MLSCHED_AUTH_ADMIN_GROUPS", "")
# The sign-on groups, as those, whose users are tenant admins: staff, in the auth group "tenant
# admins", of the tenants they own (quotas.sign_on.tenant_admin_by); none, unset.
MLSCHED_AUTH_TENANT_ADMIN_GROUPS = os.environ.get("MLSCHED_AUTH_TENANT_ADMIN_GROUPS", "")
MLSCHED_AUTH_PROXY_FROM = os.environ.get("MLSCHED_AUTH_PROXY_FROM", "")
for _network in filter(None, (part.strip() for part in MLSCHED_AUTH_PROXY_FROM.split(","))):
    try:
        ipaddress.ip_network(_network)
    except ValueError:
        raise ImproperlyConfigured(
            f"MLSCHED_AUTH_PROXY_FROM: {_network!r} is no network: networks with commas, "
            "e.g. 10.0.0.0/8,192.168.1.7"
        ) from None
LOGOUT_REDIRECT_URL = os.environ.get("MLSCHED_AUTH_LOGOUT_URL", "") or "/"
# Single sign-on spoken by the web app itself, OpenID Connect's authorization code flow with
# PKCE (quotas/oidc.py): the identity provider's issuer URL (unset: none), the portal's client
# there, what the login page's link calls it, the scopes asked, the ID token's claims giving
# the username and the groups (teams' member_groups; none read, unset). First logins make
# accounts as MLSCHED_AUTH_CREATES_USERS says.
MLSCHED_OIDC_ISSUER = os.environ.get("MLSCHED_OIDC_ISSUER", "")
MLSCHED_OIDC_CLIENT_ID = os.environ.get("MLSCHED_OIDC_CLIENT_ID", "")
MLSCHED_OIDC_CLIENT_SECRET = os.environ.get("MLSCHED_OIDC_CLIENT_SECRET", "")
MLSCHED_OIDC_NAME = os.environ.get("MLSCHED_OIDC_NAME", "") or "single sign-on"
MLSCHED_OIDC_SCOPES = os.environ.get("MLSCHED_OIDC_SCOPES", "") or "openid email profile"
MLSCHED_OIDC_USERNAME_CLAIM = (
    os.environ.get("MLSCHED_OIDC_USERNAME_CLAIM", "") or "preferred_username"
)
MLSCHED_OIDC_GROUPS_CLAIM = os.environ.get("MLSCHED_OIDC_GROUPS_CLAIM", "")
# How often a session OpenID Connect signed in is checked again with the provider, by its
# refresh token (quotas/oidc_sessions.py): a user the provider signed out, disabled or moved
# to other groups is followed within that time. 0: never (the session lasts as Django's).
_recheck = os.environ.get("MLSCHED_OIDC_RECHECK_S", "") or "300"
if not _recheck.isdigit():
    raise ImproperlyConfigured(
        f"MLSCHED_OIDC_RECHECK_S: {_recheck!r} is no number of seconds (0: never)"
    )
MLSCHED_OIDC_RECHECK_S = int(_recheck)


def check_oidc_issuer(issuer: str, client_id: str) -> None:
    """The server does not start with an issuer it could not sign anyone in with: one that is
    no https URL (http for this machine alone), or one without the portal's client id."""
    parts = urlsplit(issuer)
    local = parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")
    if not parts.hostname or not (parts.scheme == "https" or local):
        raise ImproperlyConfigured(
            f"MLSCHED_OIDC_ISSUER: {issuer!r} is no https URL, e.g. https://sso.example.com/realms/ml"
        )
    if not client_id:
        raise ImproperlyConfigured("MLSCHED_OIDC_CLIENT_ID must be set with MLSCHED_OIDC_ISSUER")


if MLSCHED_OIDC_ISSUER:
    check_oidc_issuer(MLSCHED_OIDC_ISSUER, MLSCHED_OIDC_CLIENT_ID)

# SCIM 2.0 provisioning (quotas/scim.py): the bearer token the identity provider (Okta, Entra
# ID) pushes users and groups to /scim/v2/ with. Set, its groups are the only ones teams and
# platform admins follow (a sign-on's groups claim or header changes nothing then); unset:
# SCIM is off, its URLs 404. A token shorter than SCIM_TOKEN_MIN refuses to start.
MLSCHED_SCIM_TOKEN = os.environ.get("MLSCHED_SCIM_TOKEN", "").strip()
SCIM_TOKEN_MIN = 32
if MLSCHED_SCIM_TOKEN and len(MLSCHED_SCIM_TOKEN) < SCIM_TOKEN_MIN:
    raise ImproperlyConfigured(
        f"MLSCHED_SCIM_TOKEN: at least {SCIM_TOKEN_MIN} characters, a random one (e.g. "
        "`openssl rand -base64 48`), as the identity provider is told it"
    )

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # First: its scheme answers a refused token with 401 and WWW-Authenticate.
        "quotas.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PARSER_CLASSES": [
        "mlsched_site.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "quotas.auth.TokenScope",  # a read-only token only reads
    ],
    "DEFAULT_THROTTLE_CLASSES": ["jobs.throttles.UserRate"],
    "EXCEPTION_HANDLER": "mlsched_site.errors.exception_handler",
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Serve the portal's assets from the app itself (whitenoise) without a collectstatic step.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
