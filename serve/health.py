"""``/livez`` (the process answers) and ``/readyz`` (it reaches what appends and reads need:
Kafka with the writer's topics, and the projectors' Redis), for a load balancer or
Kubernetes' probes. Not ready is ``503 NOT_READY`` naming each check that failed and why."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from dsh.errors import SessionError
from serve.access import clients
from serve.appends import ERRORS
from serve.clients import Clients
from servicekit import health
from servicekit.redis_clients import redis_unreachable
from servicekit.topics import partition_counts

router = APIRouter()

KAFKA_PROBE_S = 2.0
TOPICS = ("commands", "events", "replies")


@router.get("/livez", summary="The process is alive")
async def livez() -> dict[str, str]:
    return {"status": "alive"}


def _checks(found: Clients) -> dict[str, str]:
    checks: dict[str, str] = {}
    try:
        names = [found.kafka.topic(t) for t in TOPICS]
        partition_counts(
            found.kafka, names, KAFKA_PROBE_S, quiet=True, admin=found.readiness_admin()
        )
        checks["kafka"] = "ok"
    except SessionError as exc:  # unreachable, refused, or a topic missing
        checks["kafka"] = f"[{exc.code}] {exc.message}"
    checks["redis"] = health.run(lambda: redis_unreachable(found.redis))
    return checks


@router.get(
    "/readyz",
    summary="Kafka (the writer's topics) and Redis answer",
    responses={503: ERRORS[503]},
)
async def readyz(request: Request) -> Any:
    status, body = health.verdict(await run_in_threadpool(_checks, clients(request)))
    if status == 200:
        return body
    return JSONResponse(body, status_code=status, media_type=health.MEDIA_TYPE)
