"""What the routes share: the Kafka clients (one ``SessionClient`` per tenant, made at its
first append) and the Redis read models. Made by the app's lifespan, never at import: the
OpenAPI document is built from an app that connects to nothing."""

from __future__ import annotations

import asyncio
import threading

from confluent_kafka.admin import AdminClient
from pydantic import SecretStr
from starlette.concurrency import run_in_threadpool

from producers import SessionClient
from projectors.inspection import Inspection
from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.views import Views
from serve.auth import Auth
from serve.feeds import Feeds
from serve.settings import ServeSettings
from servicekit import kafka_clients
from servicekit.redis_clients import RedisClient
from servicekit.settings import KafkaSettings


class Clients:
    def __init__(
        self,
        settings: ServeSettings,
        kafka: KafkaSettings,
        redis: RedisClient,
        keys: Keys,
        auth: Auth,
    ) -> None:
        self.settings, self.kafka, self.redis, self.auth = settings, kafka, redis, auth
        self.views = Views(redis, keys, timeout_s=settings.default_wait_ms / 1000)
        self.reader = Reader(redis, keys)
        self.inspection = Inspection(redis, keys)
        self.feeds = Feeds(self.reader)
        self._appenders: dict[str | None, SessionClient] = {}
        self._making: dict[str | None, asyncio.Future[SessionClient]] = {}  # on the event loop
        self._lock = threading.Lock()
        self._probe: AdminClient | None = None
        self.streams = threading.BoundedSemaphore(settings.max_streams)
        # Set when the server begins to stop (serve.draining): open streams end then.
        self.stopping = threading.Event()

    async def appender_for(self, tenant: str | None) -> SessionClient:
        """The tenant's client, made on a worker thread at its first append (a Kafka round
        trip: up to the topics' timeout while Kafka is away). The appends that come for it
        meanwhile wait for that one making on the event loop, holding no thread each, so a
        tenant's burst during an outage cannot take the pool from every other request."""
        client = self._appenders.get(tenant)  # no lock: one dict.get is atomic
        if client is not None:
            return client
        making = self._making.get(tenant)
        if making is None:
            making = asyncio.ensure_future(run_in_threadpool(self.appender, tenant))
            self._making[tenant] = making
            making.add_done_callback(lambda _: self._making.pop(tenant, None))
        # Shielded: a caller that goes away does not cancel the making the others wait for.
        return await asyncio.shield(making)

    def appender(self, tenant: str | None) -> SessionClient:
        """The client that appends for ``tenant`` (None: auth off, no credential): made at the
        first append, so the service starts, and says why it is not ready, without Kafka."""
        with self._lock:
            client = self._appenders.get(tenant)
            if client is None:
                key = None if tenant is None else self.auth.tenancy.keys[tenant].decode()
                client = SessionClient(
                    settings=self.kafka,
                    timeout=self.settings.append_timeout_s,
                    tenant=tenant,
                    tenant_key=None if key is None else SecretStr(key),
                    wait_for_room=False,  # this runs on the event loop: 503 at once, not a stall
                )
                self._appenders[tenant] = client
            return client

    def readiness_admin(self) -> AdminClient:
        """The Kafka client of the readiness probe, made at its first probe and kept: a new one
        per probe would log in (TLS, SASL) and fetch the metadata anew every few seconds."""
        with self._lock:
            if self._probe is None:
                self._probe = kafka_clients.admin(self.kafka, quiet=True)
            return self._probe

    def close(self) -> None:
        with self._lock:
            appenders, self._appenders = list(self._appenders.values()), {}
        for client in appenders:
            client.close()
        self.redis.close()
