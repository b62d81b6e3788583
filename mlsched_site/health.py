"""GET /healthz for load balancers: 200 while the database answers, 503 naming what failed.

Redis is reported but never fails the check: it holds no state of record (the Celery broker,
the Channels layer, rate counters), so taking every web replica out of rotation while it is down
would turn a degraded portal into none at all.
"""

import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import JsonResponse
from redis.asyncio import Redis
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

# A probe must answer within the load balancer's own timeout, even when Redis hangs.
REDIS_TIMEOUT_S = 0.5


async def healthz(request):
    # Async so that waiting on Redis holds no thread.
    checks = {"database": await sync_to_async(database_status)(), "redis": await redis_status()}
    healthy = checks["database"] == "ok"
    body = {"status": "ok" if healthy else "failing", **checks}
    return JsonResponse(body, status=200 if healthy else 503)


def database_status() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        logger.exception("health check: the database does not answer")
        return "down"
    return "ok"


async def redis_status() -> str:
    if not settings.REDIS_URL:
        return "unused"  # the embedded mode: in-memory channel layer and counters
    client = Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
    )
    try:
        await client.ping()
    except (RedisError, OSError) as error:
        logger.warning("health check: Redis does not answer: %s", error)
        return "down"
    finally:
        await client.aclose()
    return "ok"
