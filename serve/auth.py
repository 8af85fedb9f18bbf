"""Bearer tokens → tenants, on the tenant model the writer already enforces.

The service keeps only SHA-256 digests of the tokens (``DSH_SERVE_TOKENS``) and compares the
digest of the presented token with each of them with ``hmac.compare_digest``, so neither the
settings nor a timing difference gives a token away; tokens are never logged. A tenant's
appends go through a ``SessionClient`` holding that tenant's key, so the writer checks the
prefix again (``TenantForbiddenError``); reads are checked here, before Redis is asked.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from producers.tenancy import Tenancy
from serve.problems import Problem
from serve.settings import ServeSettings
from servicekit.settings import ConfigError


@dataclass(frozen=True)
class Principal:
    """Who a request is: a tenant and its prefixes, or ``None`` with auth off (trusted)."""

    tenant: str | None
    prefixes: tuple[str, ...] = ()

    def check(self, session_id: str) -> None:
        if self.tenant is not None and not session_id.startswith(self.prefixes):
            raise Problem(
                403,
                "TENANT_PREFIX_FORBIDDEN",
                f"tenant {self.tenant!r} may use only sessions starting with "
                f"{' or '.join(repr(p) for p in self.prefixes)}",
            )


TRUSTED = Principal(None)


@dataclass(frozen=True)
class Auth:
    digests: tuple[tuple[bytes, str], ...]  # (sha256 hex digest, tenant)
    tenancy: Tenancy

    @classmethod
    def from_settings(cls, settings: ServeSettings) -> Auth:
        tenancy = Tenancy.parse(settings.tenant_prefixes, settings.tenant_keys.get_secret_value())
        digests: list[tuple[bytes, str]] = []
        for item in filter(None, settings.tokens.get_secret_value().split(",")):
            tenant, _, hashes = item.strip().partition("=")
            for digest in filter(None, hashes.split("|")):
                digest = digest.strip().lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ConfigError(
                        f"DSH_SERVE_TOKENS: tenant {tenant.strip()!r}: a token must be given as "
                        "its SHA-256 hex digest (64 hex digits)",
                        code="SERVE_TOKENS",
                    )
                digests.append((digest.encode(), tenant.strip()))
        named = {tenant for _, tenant in digests}
        if named - set(tenancy.prefixes) or (tenancy.enabled and not digests):
            raise ConfigError(
                "DSH_SERVE_TOKENS must name exactly tenants of DSH_SERVE_TENANT_PREFIXES and "
                f"DSH_SERVE_TENANT_KEYS (tokens name {sorted(named)}, tenants are "
                f"{sorted(tenancy.prefixes)})",
                code="SERVE_TOKENS",
            )
        return cls(tuple(digests), tenancy)

    @property
    def enabled(self) -> bool:
        return bool(self.digests)

    def principal(self, authorization: str | None) -> Principal:
        """The caller of a request with this ``Authorization`` header, or 401."""
        if not self.enabled:
            return TRUSTED
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("a bearer token is required (Authorization: Bearer <token>)")
        presented = hashlib.sha256(token.strip().encode()).hexdigest().encode()
        found = None
        for digest, tenant in self.digests:  # every one, so the time says nothing of which
            if hmac.compare_digest(digest, presented):
                found = tenant
        if found is None:
            raise _unauthorized("the bearer token is not known")
        return Principal(found, self.tenancy.prefixes[found])


def _unauthorized(detail: str) -> Problem:
    return Problem(401, "UNAUTHORIZED", detail, **{"WWW-Authenticate": 'Bearer realm="dsh"'})
