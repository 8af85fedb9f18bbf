"""An OpenAI Agents SDK ``Session`` backed by a dsh session: the agent's memory is the log.

``Runner.run(agent, input, session=DshAgentsSession(session_id, client))`` keeps the
conversation in ``dsh.session.events``, validated by the writer like any other append, so
every projection (surface, transcript, audit), ``dsh verify`` and compaction apply to it.
Each SDK input item is one event (the mapping: ``producers.agents_items``).

``get_items`` returns the *surface* — what the model sees next — so a compaction appended by
any service replaces the history the SDK sends; reasoning items are not returned (the SDK
cannot replay them without the provider's encrypted content, which the vocabulary does not
hold). The items come from a local copy of the session: restored from the events topic once,
then kept in step by this object's own appends, each sent with ``expected_seq`` so a session
someone else appended to meanwhile is refused (EXPECTED_SEQ_MISMATCH), never forked silently;
the copy is then re-read from the topic (also on :meth:`refresh`).

An append-only log cannot delete, so:

- ``pop_item`` replaces the last surface node that yields an item with an empty
  ``system/message`` (it projects to nothing) citing it: the item leaves the surface, stays in
  the log, transcript and audit. If that node held several items (a message another producer
  wrote with text and tool calls), all of them leave the surface; the last is returned.
- ``clear_session`` is a compaction to nothing: ``compaction/start``, then empty
  ``system/message`` replacements citing every current node (node 0 on its own when it is a
  system prompt, as the node-0 rule requires), then ``compaction/end``. The model sees an empty
  history; the human transcript and the log keep every turn.

Both need an open turn and step (``system/message`` names them); they open one if needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

import dsh
from dsh.projections import Interpreter
from producers.agents_items import PLUGIN, Planner, UnsupportedItemError, message_items, message_of

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings

    from producers.client import SessionClient

__all__ = ["DshAgentsSession", "UnsupportedItemError"]


class DshAgentsSession:
    """Implements the ``agents.memory.Session`` protocol (async) on a ``SessionClient``."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        client: SessionClient,
        *,
        provider: str = "openai",
        model: str = "unknown",
        interpreters: Mapping[str, Interpreter] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.session_id = session_id
        self.client = client
        self.source = {"kind": "model", "provider": provider, "model": model}
        self.timeout_s = timeout_s
        # A session that logged a message projection restores only with its interpreter
        # (None: the client's own).
        self._interpreters = interpreters
        self._local: dsh.Session | None = None
        self._lock = asyncio.Lock()

    # -- the Session protocol -------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        async with self._lock:
            local = await self._session()
            items = [item for m in local.derive_messages() for item in message_items(m)]
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if not items:
            return
        async with self._lock:
            plan = Planner(await self._session(), self.source)
            try:
                for item in items:
                    plan.item(cast(Mapping[str, Any], item))
            except BaseException:
                # The local copy took the items before the refused one: drop it (re-read on
                # next use). Nothing was sent: the batch is all-or-nothing.
                self._local = None
                raise
            await self._send(self._futures(plan))

    async def pop_item(self) -> TResponseInputItem | None:
        async with self._lock:
            local = await self._session()
            for seq in reversed(local.surface.nodes):
                message = message_of(local, seq)
                popped = message_items(message) if message is not None else []
                if popped:
                    break
            else:
                return None
            plan = Planner(local, self.source)
            plan.open_step()
            plan.append(
                "system/message",
                plan.system_data(f"pop-{len(local)}", []),
                dsh.Replace(seq, seq),
                [seq],
            )
            await self._send(self._futures(plan))
        return cast("TResponseInputItem", popped[-1])

    async def clear_session(self) -> None:
        async with self._lock:
            local = await self._session()
            nodes = list(local.surface.nodes)
            if not local.derive_messages():
                return  # the model already sees nothing
            plan = Planner(local, self.source)
            plan.open_step()
            plan.append("compaction/start", {"reason": "clear_session", "plugin": PLUGIN})
            ranges = [nodes]
            if local.event(nodes[0]).type == "system/message" and len(nodes) > 1:
                ranges = [nodes[:1], nodes[1:]]  # node 0 may only be replaced on its own
            for hidden in ranges:
                plan.append(
                    "system/message",
                    plan.system_data(f"clear-{len(local)}", []),
                    dsh.Replace(hidden[0], hidden[-1]),
                    hidden,
                )
            plan.append("compaction/end", {"reason": "clear_session", "replaced": len(nodes)})
            await self._send(self._futures(plan))

    # -- the local copy -------------------------------------------------------------------

    async def refresh(self) -> None:
        """Re-read the session from the events topic (e.g. after another service appended)."""
        async with self._lock:
            self._local = None
            await self._session()

    async def _session(self) -> dsh.Session:
        if self._local is None:
            self._local = await asyncio.to_thread(
                self.client.read, self.session_id, None, self._interpreters
            )
        return self._local

    async def _send(self, futures: Sequence[Future[Any]]) -> None:
        """Wait for the writer's answer to every append; on any failure the local copy may be
        ahead of the log, so it is dropped (re-read on next use) before the error propagates."""
        try:
            for future in futures:
                await asyncio.wrap_future(future)
        except BaseException:
            self._local = None
            raise

    def _futures(self, plan: Planner) -> list[Future[Any]]:
        return [
            self.client.append_async(
                self.session_id,
                type_,
                data,
                surface_op=op,
                source_event_seqs=sources,
                expected_seq=seq,
                timeout=self.timeout_s,
            )
            for type_, data, op, sources, seq in plan.drafts
        ]
