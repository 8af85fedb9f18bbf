"""``/livez`` (the process answers) and ``/readyz`` (it reaches what appends and reads need:
Kafka with the writer's topics, and the projectors' Redis), for a load balancer or
Kubernetes' probes. Not ready is ``503 NOT_READY`` naming each check that failed and why."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from dsh.errors import SessionError
from serve.access import clients
from serve.appends import ERRORS
from serve.clients import Clients
from serve.problems import response
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
        partition_counts(found.kafka, names, KAFKA_PROBE_S, quiet=True)
        checks["kafka"] = "ok"
    except SessionError as exc:  # unreachable, refused, or a topic missing
        checks["kafka"] = f"[{exc.code}] {exc.message}"
    try:
        found.redis.ping()
        checks["redis"] = "ok"
    except Exception as exc:  # any failure to answer is "not ready", with what it was
        checks["redis"] = f"[REDIS_UNREACHABLE] {type(exc).__name__}: {exc}"
    return checks


@router.get(
    "/readyz",
    summary="Kafka (the writer's topics) and Redis answer",
    responses={503: ERRORS[503]},
)
async def readyz(request: Request) -> Any:
    checks = await run_in_threadpool(_checks, clients(request))
    failing = {name: why for name, why in checks.items() if why != "ok"}
    if not failing:
        return {"status": "ready", "checks": checks}
    detail = "; ".join(f"{name}: {why}" for name, why in failing.items())
    return response(503, "NOT_READY", detail, checks=checks)
