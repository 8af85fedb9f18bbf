"""The HTTP API's checked-in OpenAPI document is the app's own, and the parts of the API that
need no pipeline: token table, problem statuses, session ids."""

from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import SecretStr

from dsh.errors import InvariantError, SessionError, SurfaceError
from producers.errors import AppendTimeoutError, ConflictError, PayloadTooLargeError
from producers.tenancy import TenantForbiddenError
from projectors.errors import ProjectionBehindError, SessionBlockedError, SessionUnknownError
from serve.auth import TRUSTED, Auth
from serve.limits import check_session_id
from serve.openapi import REGENERATE, document
from serve.problems import Problem, problem_type, status_of
from serve.settings import ServeSettings
from servicekit.settings import ConfigError
from tests.docs_blocks import ROOT


def test_the_checked_in_openapi_document_is_the_apps() -> None:
    checked_in = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert checked_in == document(), f"docs/openapi.json is stale: run `{REGENERATE}`"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (SurfaceError("x", code="SURFACE_OP_REQUIRED"), 422),
        (InvariantError("x", code="NO_OPEN_TURN"), 422),
        (ConflictError("x"), 409),
        (PayloadTooLargeError("x"), 413),
        (TenantForbiddenError("x", code="TENANT_MISSING"), 403),
        (SessionUnknownError("x"), 404),
        (SessionBlockedError("x"), 409),
        (ProjectionBehindError("x"), 503),
        (AppendTimeoutError("x"), 503),
        (SessionError("x"), 500),
    ],
)
def test_each_error_class_has_its_status(error: SessionError, status: int) -> None:
    assert status_of(error) == status


def test_a_problem_type_is_a_stable_uri_per_code() -> None:
    assert problem_type("EXPECTED_SEQ_MISMATCH") == (
        "https://dsh-pipeline.dev/problems/expected-seq-mismatch"
    )


def _settings(tokens: str, prefixes: str = "", keys: str = "") -> ServeSettings:
    return ServeSettings(
        tokens=SecretStr(tokens), tenant_prefixes=prefixes, tenant_keys=SecretStr(keys)
    )


def test_tokens_are_kept_as_digests_and_map_to_their_tenant() -> None:
    digest = hashlib.sha256(b"s3cret").hexdigest()
    auth = Auth.from_settings(_settings(f"acme={digest}", "acme=acme-|shared-", "acme=k"))
    principal = auth.principal("Bearer s3cret")
    assert principal.tenant == "acme" and principal.prefixes == ("acme-", "shared-")
    principal.check("shared-1")
    with pytest.raises(Problem) as forbidden:
        principal.check("globex-1")
    assert forbidden.value.status == 403
    for header in (None, "Bearer nope", "Basic s3cret", "Bearer "):
        with pytest.raises(Problem) as refused:
            auth.principal(header)
        assert refused.value.status == 401
        assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")
    assert "s3cret" not in repr(_settings(f"acme={digest}", "acme=acme-", "acme=k"))


def test_no_tokens_is_one_trusted_deployment() -> None:
    auth = Auth.from_settings(ServeSettings())
    assert not auth.enabled and auth.principal(None) is TRUSTED
    TRUSTED.check("any-session")


@pytest.mark.parametrize(
    "tokens, prefixes, keys",
    [
        ("acme=plain-token", "acme=acme-", "acme=k"),  # not a digest
        (f"globex={'0' * 64}", "acme=acme-", "acme=k"),  # a tenant without prefixes
        ("", "acme=acme-", "acme=k"),  # tenants that no token can reach
    ],
)
def test_a_bad_token_table_stops_the_service(tokens: str, prefixes: str, keys: str) -> None:
    with pytest.raises(ConfigError):
        Auth.from_settings(_settings(tokens, prefixes, keys))


@pytest.mark.parametrize("session_id", ["", "a/b", "{tag}", "a b", "-x", "é", "x" * 201])
def test_session_ids_outside_the_charset_or_length_are_refused(session_id: str) -> None:
    with pytest.raises(Problem) as refused:
        check_session_id(session_id, 200)
    assert refused.value.status == 422 and refused.value.code == "INVALID_SESSION_ID"
