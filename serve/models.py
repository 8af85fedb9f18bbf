"""The JSON bodies of the API, for validation and for the OpenAPI document.

Events are in the contract's wire shape (camelCase: ``surfaceOp``, ``sourceEventSeqs``); the
API's own fields are snake_case (``expected_seq``, ``committed_seq``, ``request_id``), as the
query parameters are. The core checks what an event means; these models check only its shape,
so a rejection names the core's own code.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from schemas.rules import LONG_MAX


class EventDraft(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="`family/name`, e.g. `user/message`")
    data: Any = Field(description="the event's data: lossless JSON")
    surface_op: Any = Field(
        None,
        alias="surfaceOp",
        description='`"append"` or `{"op": "replace", "startSeq": n, "endSeq": m}`; required '
        "on the four surface types, forbidden on the others",
    )
    source_event_seqs: Any = Field(
        None, alias="sourceEventSeqs", description="seqs this event cites (list of ints)"
    )
    # Strict, as every boolean here: the contract takes JSON booleans only, where lax mode
    # would take "yes", "off" or 1 for one (an unknown type kept that nobody marked).
    ignorable: StrictBool = Field(False, description="only `true` or absent: an unknown type kept")


class AppendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[EventDraft] = Field(
        min_length=1, description="appended all or nothing, in this order"
    )
    expected_seq: int | None = Field(
        None,
        ge=0,
        le=LONG_MAX,  # a seq is an Avro long: a bigger one is the caller's 422, not the codec's
        description="the seq the first event must get (optimistic concurrency)",
    )
    invariants: StrictBool | None = Field(
        None,
        description="the turn-invariants mode a new session is created with (default on); "
        "for an existing session, the mode it must have",
    )


class WireEvent(BaseModel):
    type: str
    seq: int
    time: int = Field(description="epoch milliseconds")
    data: Any
    surfaceOp: Any = None  # the wire's own name
    sourceEventSeqs: list[int] | None = None
    ignorable: bool | None = None


class AppendResponse(BaseModel):
    request_id: str = Field(description="the Idempotency-Key, given or generated")
    committed_seq: int = Field(description="the seq of the last event committed")
    events: list[WireEvent]


class SurfaceResponse(BaseModel):
    applied: int = Field(description="the last seq the surface projection applied")
    nodes: list[int]
    replaceGeneration: int
    contentGeneration: int
    messages: list[Any] = Field(description="what the model sees next")
    blocked: Any = None


class TranscriptResponse(BaseModel):
    applied: int
    entries: list[Any] = Field(description="wire events with `kind`: `surface` or `progress`")
    blocked: Any = None


class AuditResponse(BaseModel):
    applied: int
    events: dict[str, Any] = Field(description="seq → what it cites, shadowed, was cited by")
    index: dict[str, list[int]]
    blocked: Any = None


class Problem(BaseModel):
    """RFC 9457 problem details, with our stable ``code``."""

    type: str = Field(description="https://dsh-pipeline.dev/problems/<code>")
    title: str
    status: int
    detail: str
    code: str = Field(description="the stable error code (docs/http-api.md)")
    request_id: str | None = None
    session_id: str | None = None


class RecentSession(BaseModel):
    session_id: str
    applied: int = Field(description="the last seq the transcript projection applied")
    time: int | None = Field(description="epoch ms of the last transcript entry")
    blocked: bool = Field(description="the transcript projection blocked the session")


class BlockedSession(BaseModel):
    session_id: str
    reasons: dict[str, Any] = Field(
        description="projection → why it blocked: `code`, `error`, `message`, `seq`, `source`"
    )


class SessionList(BaseModel):
    recent: list[RecentSession] = Field(description="most recently active first")
    blocked: list[BlockedSession]


class ProjectionState(BaseModel):
    applied: int
    blocked: Any = Field(None, description="why the projector blocked the session, if it did")
    rebuilding: Any = Field(None, description="set while a rebuild is under way")


class SessionState(BaseModel):
    session_id: str
    projections: dict[str, ProjectionState] = Field(description="surface, transcript, audit")


class SurfaceNode(BaseModel):
    seq: int
    type: str | None
    message: Any = Field(description="the node's current message")
    empty: bool | None = Field(None, description="projects to no message (empty content)")
    replaced: list[int] | None = Field(None, description="a replacement: the seqs it replaced")


class SurfaceNodesResponse(BaseModel):
    applied: int
    replaceGeneration: int
    contentGeneration: int
    nodes: list[SurfaceNode] = Field(description="the surface in order, one per node")
    blocked: Any = None


class ReplacedEvent(BaseModel):
    seq: int
    type: str | None
    time: int | None
    message: Any = Field(None, description="its message, where a read model keeps it")
    replaced: list[int] | None = Field(None, description="itself a replacement of these seqs")


class ProvenanceResponse(BaseModel):
    seq: int
    type: str
    time: int
    surfaceOp: Any = None
    sourceEventSeqs: list[int] | None = None
    shadowed: list[int] | None = None
    citedBy: list[int]
    shadowedBy: int | None = None
    replaced: list[ReplacedEvent] = Field(description="what it took off the surface, in order")


class TranscriptPage(BaseModel):
    applied: int
    entries: list[Any] = Field(description="wire events with `kind`, after `after`, in order")
    blocked: Any = Field(None, description="why the projector blocked the session, if it did")
