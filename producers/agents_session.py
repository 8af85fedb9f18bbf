"""An OpenAI Agents SDK ``Session`` backed by a dsh session: the agent's memory is the log.

``Runner.run(agent, input, session=DshAgentsSession(session_id, client))`` keeps the
conversation in ``dsh.session.events``, validated by the writer like any other append, so
every projection (surface, transcript, audit), ``dsh verify`` and compaction apply to it.
Each SDK input item is one event (the mapping: ``producers.agents_items``), and the event
carries the item as it was added, so ``get_items`` gives back exactly what was added.

``get_items`` returns the *surface* — what the model sees next — so a compaction appended by
any service replaces the history the SDK sends. Like the SDK's own backends, every read is of
the session as committed now (:meth:`_read`, the one read path: the writer answers it). A
write is planned on the state this instance last read or committed, and sent as one
all-or-nothing command with ``expected_seq``: if another producer appended since, it is
refused whole (EXPECTED_SEQ_MISMATCH), planned again on a fresh read, never forked. A plan
that sends nothing, or is refused, on that state is made again on a fresh read too: no command
would carry an ``expected_seq`` to tell it was stale. So an ``add_items`` is one round trip
unless another producer got in first.

Every call runs its blocking work in a worker thread under a ``threading.Lock`` of this
object, so one instance is safe from any thread and any event loop.

An append-only log cannot delete, so:

- ``pop_item`` replaces the last surface node that yields an item with an empty
  ``system/message`` (it projects to nothing) citing it: the item leaves the surface, stays in
  the log, transcript and audit. If that node held several items (a message another producer
  wrote with text and tool calls), all of them leave the surface; the last is returned. A
  popped ``function_call_output`` stays its call's one result in the log, so it can be added
  again only with its call (``producers.agents_items``).
- ``clear_session`` is a compaction to nothing: ``compaction/start``, then empty
  ``system/message`` replacements citing every current node (node 0 on its own when it is a
  system prompt, as the node-0 rule requires), then ``compaction/end``. The model sees an empty
  history; the human transcript and the log keep every turn.

Both need an open turn and step (``system/message`` names them); they open one if needed.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import dsh
from dsh.errors import ValidationError
from dsh.projections import Interpreter
from dsh.restore import restore
from producers.agents_items import PLUGIN, Planner, UnsupportedItemError
from producers.agents_position import Position
from producers.agents_surface import SurfaceItems
from producers.errors import AppendTimeoutError
from schemas import draft

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings

    from producers.client import SessionClient

__all__ = ["DshAgentsSession", "UnsupportedItemError"]

# A refused append (another producer appended in between) is planned again on a fresh read, at
# most this many times in all.
ATTEMPTS = 5
# A command that timed out is sent again under its request id this many times before the
# timeout reaches the caller.
TIMEOUT_RESENDS = 2
_T = TypeVar("_T")


class DshAgentsSession:
    """Implements the ``agents.memory.Session`` protocol (async) on a ``SessionClient``."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        client: SessionClient,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        provider: str = "openai",
        model: str = "unknown",
        interpreters: Mapping[str, Interpreter] | None = None,
        timeout_s: float | None = None,
        reader: Callable[[str], dsh.Session] | None = None,
    ) -> None:
        """``session_settings``: as the SDK's backends take it (a dict is normalised, unknown
        keys are a ``TypeError``); its ``limit`` is ``get_items``' default.

        ``reader``: how a session is read as committed now (default ``client.read``, with
        ``interpreters``: a session that logged a message projection restores only with its
        interpreter)."""
        # The SDK is imported when a session is made, not with this module (it is large).
        from agents.memory.session_settings import SessionSettings, coerce_session_settings

        self.session_id = session_id
        self.client = client
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.source = {"kind": "model", "provider": provider, "model": model}
        self.timeout_s = timeout_s
        self._reader = reader
        self._interpreters = client.interpreters if interpreters is None else interpreters
        # What this instance last read or committed: writes are planned on it, and a stale one
        # is refused by expected_seq. None while a plan may have changed it.
        self._known: dsh.Session | None = None
        # Where _known stands for the next item, and its surface's items: both kept up to date
        # with it, so a call costs what changed, not the session.
        self._position = Position()
        self._items = SurfaceItems()
        # Held by worker threads, never by an event loop: no asyncio primitive is shared
        # across loops.
        self._lock = threading.Lock()

    # -- the Session protocol -------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return await self._call(self._get_items, limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if items:
            await self._call(self._add_items, list(items))

    async def pop_item(self) -> TResponseInputItem | None:
        return await self._call(self._pop_item)

    async def clear_session(self) -> None:
        await self._call(self._clear_session)

    # -- the blocking work, one call at a time per instance -------------------------------

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        def locked() -> _T:
            with self._lock:
                return fn(*args)

        return await asyncio.to_thread(locked)

    def _read(self) -> dsh.Session:
        """The session as committed now: the one read path. What this instance knew is
        brought up to date with the events since (the writer answers from its end), so a
        read costs what changed, not the session; ``reader`` replaces it with whole reads."""
        known, self._known = self._known, None  # kept again once brought up to date
        if self._reader is not None:
            fresh = self._reader(self.session_id)
            self._position = Position()  # a session of its own each time: folded anew
        elif known is None:
            # The whole session, in the invariants mode it was created with (a bare one, e.g.
            # imported with invariants off, would not restore into a default session).
            fresh = self.client.read(self.session_id, self.timeout_s, self._interpreters)
            self._position = Position()
        else:
            # Events this instance planned and saw committed keep its own clock's times; every
            # other field is as logged (expected_seq committed them exactly there).
            tail = self.client.read_events(self.session_id, len(known), self.timeout_s)
            fresh = restore(known, tail, None, mark_end=False)
        self._position.advance(fresh)
        self._known = fresh
        return fresh

    def _get_items(self, limit: int | None) -> list[TResponseInputItem]:
        from agents.memory.session_settings import resolve_session_limit

        s = self._read()
        items = self._items.last(s, resolve_session_limit(limit, self.session_settings))
        return cast("list[TResponseInputItem]", items)

    def _add_items(self, items: list[TResponseInputItem]) -> None:
        def plan(p: Planner) -> None:
            for item in items:
                p.item(cast(Mapping[str, Any], item))

        self._append(plan)

    def _pop_item(self) -> TResponseInputItem | None:
        popped: list[Any] = []

        def plan(p: Planner) -> None:
            popped.clear()
            found = self._items.last_node(p.local)
            if found is None:
                return
            seq, item = found
            popped.append(item)
            p.open_step()
            data = p.system_data(f"pop-{len(p.local)}", [])
            p.append("system/message", data, dsh.Replace(seq, seq), [seq])

        self._append(plan)
        return cast("TResponseInputItem", popped[0]) if popped else None

    def _clear_session(self) -> None:
        self._append(_plan_clear)

    def _replace_items(self, items: list[TResponseInputItem]) -> None:
        def plan(p: Planner) -> None:
            _plan_clear(p)
            for item in items:
                p.item(cast(Mapping[str, Any], item))

        self._append(plan)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """The history replaced by ``items`` in one command: a clear, then the items.

        The hook the SDK's ``OpenAIResponsesCompactionSession`` (0.24.0) uses, when the
        backend has it, instead of ``clear_session`` then ``add_items``. Its compacted output
        holds ``compaction`` items, which have no faithful event: refused before anything is
        sent, so the history stays as it was (not cleared, restored and logged twice)."""
        await self._call(self._replace_items, list(items))
        return True

    def _send(self, drafts: list[dict[str, Any]], expected_seq: int, request_id: str) -> None:
        """One all-or-nothing command. One that timed out may have committed: it is sent again
        under the same request id, which the writer answers with its events if it did and
        commits once if it did not, so a timeout does not make the caller's retry, on a fresh
        read that holds the items, add them twice."""
        for resend in range(TIMEOUT_RESENDS + 1):
            try:
                self.client.append_many(
                    self.session_id,
                    drafts,
                    expected_seq=expected_seq,
                    request_id=request_id,
                    timeout=self.timeout_s,
                )
                return
            except AppendTimeoutError:
                if resend == TIMEOUT_RESENDS:
                    raise

    def _append(self, plan: Callable[[Planner], None]) -> None:
        """Plan on what this instance last read or committed (the copy checks every event and
        gives its seq), then send the plan as one all-or-nothing command expecting that seq;
        planned again on a fresh read if another producer appended since."""
        cached = self._known is not None
        for attempt in range(1, ATTEMPTS + 1):
            local = self._known if cached and self._known is not None else self._read()
            self._known = None  # the plan changes it: kept again only if it commits
            start = len(local)
            planner = Planner(local, self.source, self._position)
            try:
                plan(planner)  # raises before anything is sent: the batch is all-or-nothing
            except ValidationError:
                if not cached:
                    raise
                # Refused on a copy that may be stale (a function_call_output whose call
                # another instance added): the outcome must be the one on the session as it
                # is, so plan again on a fresh read, which raises if the refusal stands.
                if len(local) == start:
                    self._known = local  # unchanged: the read asks only for what came since
                cached = False
                continue
            if not planner.drafts:
                self._known = local
                if not cached:
                    return
                # Nothing to pop or clear on what this instance knew, but someone may have
                # appended since; with no command, no expected_seq would tell: read and plan.
                cached = False
                continue
            drafts = [
                draft(type_, data, surface_op=op, source_event_seqs=sources)
                for type_, data, op, sources, _ in planner.drafts
            ]
            try:
                self._send(drafts, start, f"agents-{uuid.uuid4().hex}")
                self._known = local  # as committed, but for the times the writer gave
                self._position = planner.position
                return
            except ValidationError as exc:
                if exc.code != "EXPECTED_SEQ_MISMATCH" or attempt == ATTEMPTS:
                    raise
                cached = False
                # Instances that collided would collide again if they all re-read at once.
                time.sleep(random.uniform(0, 0.005 * attempt))


def _plan_clear(p: Planner) -> None:
    """A compaction to nothing (``clear_session``); nothing if the model already sees nothing."""
    local = p.local
    if not local.derive_messages():
        return
    nodes = list(local.surface.nodes)
    p.open_step()
    p.append("compaction/start", {"reason": "clear_session", "plugin": PLUGIN})
    ranges = [nodes]
    if local.event(nodes[0]).type == "system/message" and len(nodes) > 1:
        ranges = [nodes[:1], nodes[1:]]  # node 0 may only be replaced on its own
    for hidden in ranges:
        p.append(
            "system/message",
            p.system_data(f"clear-{len(local)}", []),
            dsh.Replace(hidden[0], hidden[-1]),
            hidden,
        )
    p.append("compaction/end", {"reason": "clear_session", "replaced": len(nodes)})
