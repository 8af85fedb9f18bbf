"""``DSH_SERVE_*``: how `dsh serve` listens, what it accepts, and who may call it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from servicekit.settings import StrictSettings


class ServeSettings(StrictSettings):
    """The HTTP API (`dsh serve`, ``DSH_SERVE_*``). With no tokens it trusts every caller (one
    trusted deployment behind its own gateway); with tokens, each maps to a tenant whose session
    id prefixes and key it appends and reads with (see docs/http-api.md)."""

    model_config = SettingsConfigDict(env_prefix="DSH_SERVE_", extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    """Address to listen on (`0.0.0.0` for every interface; `dsh serve --host` wins)."""
    port: Annotated[int, Field(ge=0, le=65535)] = 18080
    """Port to listen on (`dsh serve --port` wins)."""
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    """Worker processes, each a whole API with its own Kafka and Redis clients (the API keeps
    no state between requests): about one per core the service may use. Limits such as
    `max_streams` apply to each."""
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 0
    """Port of `/metrics` (Prometheus; `0`: none), counting every worker's requests. A port of
    its own, as the writer's and the projectors': the API's port faces clients, who have no
    business reading the service's metrics (its `/livez` and `/readyz` stay on the API's
    port)."""
    access_log: bool = True
    """A log line for each request (uvicorn's access log, at INFO). `false` spares the worker
    the cost of a log line per request where a gateway in front logs them already."""
    max_body_bytes: Annotated[int, Field(ge=1024)] = 1_000_000
    """Largest request body; a longer one is `413 BODY_TOO_LARGE` before it is parsed (Kafka
    takes commands of about 1 MB at most)."""
    max_events: Annotated[int, Field(ge=1)] = 500
    """Most events one append request may carry (`422 TOO_MANY_EVENTS`)."""
    max_session_id_length: Annotated[int, Field(ge=1, le=1024)] = 200
    """Longest session id the API takes (`422 INVALID_SESSION_ID`)."""
    max_wait_ms: Annotated[int, Field(ge=0)] = 30_000
    """Cap of a read's `timeout_ms` (how long it waits for `at_least`)."""
    default_wait_ms: Annotated[int, Field(ge=0)] = 5_000
    """A read's wait for `at_least` when it gives no `timeout_ms`."""
    append_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    """How long an append waits for the writer's reply before `503 APPEND_TIMEOUT` (retry with
    the same `Idempotency-Key`: the outcome is then the original one)."""
    retry_after_s: Annotated[int, Field(ge=1)] = 1
    """`Retry-After` of every 503: writer unavailable, append timeout, projection behind, session
    rebuilding, Kafka or Redis out of reach, too many streams."""
    max_streams: Annotated[int, Field(ge=1)] = 100
    """Most transcript streams open at once (`503 TOO_MANY_STREAMS` beyond). The streams of one
    session share one follow of it (a thread and a Redis connection while it waits)."""
    shutdown_timeout_s: Annotated[int, Field(ge=1, le=3600)] = 25
    """On SIGTERM, how long the requests in hand may take before they are cut and the process
    exits (open transcript streams end at once). Keep it below the supervisor's grace period
    (35 s in deploy/k8s/serve.yaml), so the process stops rather than being killed."""
    tokens: SecretStr = SecretStr("")
    """Bearer tokens per tenant, as SHA-256 hex digests: `acme=<sha256>|<sha256>,globex=<sha256>`
    (`printf %s "$TOKEN" \\| sha256sum`). Empty: no authentication (one trusted deployment)."""
    tenant_prefixes: str = ""
    """Session id prefixes of each tenant a token names, as the writer's
    `DSH_WRITER_TENANT_PREFIXES`: `acme=acme-|shared-,globex=globex-`."""
    tenant_keys: SecretStr = SecretStr("")
    """Key of each tenant a token names, as the writer's `DSH_WRITER_TENANT_KEYS`; the service
    signs each tenant's appends with it, so the writer checks them too."""
