"""Per-tenant session id prefixes: which sessions a client credential may write.

Kafka does not tell a consumer who produced a record, so the writer cannot see the SASL
principal behind a command. The credential therefore travels with the command: a client
configured with a tenant id and that tenant's key sends two record headers, ``dsh-tenant``
and ``dsh-tenant-mac`` = HMAC-SHA256(key, the command's exact value bytes). The writer,
configured with every tenant's key and allowed session id prefixes, recomputes the MAC and
refuses (a typed ``TenantForbiddenError`` reply, nothing appended) a command that carries no
tenant, an unknown tenant, a MAC that does not match, or a session id outside the tenant's
prefixes. The MAC binds the whole command (request id, session id, events), so a header
copied onto other bytes is refused; replaying the same bytes is answered from the request
id, never appended twice. Kafka ACLs still decide who may produce to the commands topic and
who may read it (only the writers and operators should: a reader of the topic sees MACs,
not keys). With no tenants configured the check is off (one trusted deployment).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dsh.errors import ValidationError, register_error
from servicekit.settings import ConfigError

TENANT_HEADER = "dsh-tenant"
MAC_HEADER = "dsh-tenant-mac"


@register_error
class TenantForbiddenError(ValidationError):
    """The command's tenant credential does not allow this session id (``code`` says why:
    TENANT_MISSING, TENANT_UNKNOWN, TENANT_BAD_MAC, TENANT_PREFIX_FORBIDDEN)."""

    default_code = "TENANT_PREFIX_FORBIDDEN"


def sign(key: bytes, value: bytes) -> str:
    return hmac.new(key, value, hashlib.sha256).hexdigest()


def tenant_headers(tenant: str, key: bytes, value: bytes) -> list[tuple[str, bytes]]:
    """The headers a client adds to one command record."""
    return [(TENANT_HEADER, tenant.encode()), (MAC_HEADER, sign(key, value).encode())]


def _pairs(spec: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, value = item.partition("=")
        if not (sep and name.strip() and value.strip()):
            raise ConfigError(f"{what}: expected 'tenant=value,…', got an item without a value")
        out[name.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Tenancy:
    prefixes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    keys: Mapping[str, bytes] = field(default_factory=dict)

    @classmethod
    def parse(cls, prefixes: str, keys: str) -> Tenancy:
        """``prefixes``: "acme=acme-|shared-,globex=globex-"; ``keys``: "acme=K1,globex=K2"."""
        by_tenant = {
            t: tuple(p for p in v.split("|") if p)
            for t, v in _pairs(prefixes, "tenant prefixes").items()
        }
        secrets = {t: k.encode() for t, k in _pairs(keys, "tenant keys").items()}
        if set(by_tenant) != set(secrets):
            raise ConfigError(
                "tenant prefixes and tenant keys must name the same tenants: "
                f"{sorted(by_tenant)} vs {sorted(secrets)}",
                code="TENANT_CONFIG",
            )
        return cls(by_tenant, secrets)

    @property
    def enabled(self) -> bool:
        return bool(self.prefixes)

    def check(
        self,
        headers: Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]] | None,
        request_id: str,
        session_id: str,
        value: bytes,
    ) -> TenantForbiddenError | None:
        """None when the command may be applied, else the rejection to reply with."""
        if not self.enabled:
            return None
        found: dict[str, bytes] = {}
        pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
        for k, v in pairs:
            if k in (TENANT_HEADER, MAC_HEADER) and v is not None:
                found[k] = v if isinstance(v, bytes) else v.encode()
        tenant = found.get(TENANT_HEADER, b"").decode(errors="replace")
        where = f"request {request_id!r} to session {session_id!r}"
        if not tenant:
            return TenantForbiddenError(f"{where}: no tenant credential", code="TENANT_MISSING")
        key = self.keys.get(tenant)
        if key is None:
            return TenantForbiddenError(
                f"{where}: unknown tenant {tenant!r}", code="TENANT_UNKNOWN"
            )
        mac = found.get(MAC_HEADER, b"")
        if not hmac.compare_digest(mac, sign(key, value).encode()):
            return TenantForbiddenError(
                f"{where}: tenant {tenant!r} credential does not match the command",
                code="TENANT_BAD_MAC",
            )
        allowed = self.prefixes[tenant]
        if not session_id.startswith(allowed):
            return TenantForbiddenError(
                f"{where}: tenant {tenant!r} may write only sessions starting with "
                f"{' or '.join(repr(p) for p in allowed)}",
                code="TENANT_PREFIX_FORBIDDEN",
            )
        return None
