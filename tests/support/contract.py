"""One contract, three backends: the same scenarios run against the in-process ``dsh.Session``,
the file store (``dsh.formats.FileStore``) and ``SessionClient`` over the real pipeline, and
every backend must answer as the in-process core does.

A scenario is a function that drives a :class:`Backend` (append, append many, fork) and
records each outcome; :func:`run` returns the outcomes and the sessions' final states, which
:func:`assert_same` compares, ignoring event times (each backend has its own clock).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dsh
from dsh.formats import FileStore, read_jsonl
from dsh.restore import restore

Outcome = tuple[Any, ...]  # ("ok", seq, …) or ("rejected", error class, code)


class Backend(ABC):
    """Somewhere sessions live, each in the invariants mode the scenario gives it."""

    name: str

    @abstractmethod
    def create(self, session_id: str, invariants: bool) -> None: ...

    @abstractmethod
    def append(
        self,
        session_id: str,
        type_: str,
        data: Any,
        surface_op: Any = None,
        sources: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> dsh.Event: ...

    @abstractmethod
    def append_many(self, session_id: str, drafts: Sequence[Mapping[str, Any]]) -> list[dsh.Event]:
        """Several events, all or nothing."""

    @abstractmethod
    def fork(self, parent_id: str, child_id: str, at: int | None) -> None: ...

    @abstractmethod
    def read(self, session_id: str) -> dsh.Session:
        """The session as this backend holds it now, read back."""


class InProcess(Backend):
    name = "session"

    def __init__(self) -> None:
        self.sessions: dict[str, dsh.Session] = {}

    def create(self, session_id: str, invariants: bool) -> None:
        self.sessions[session_id] = dsh.Session.create(session_id, invariants=invariants)

    def append(
        self,
        session_id: str,
        type_: str,
        data: Any,
        surface_op: Any = None,
        sources: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> dsh.Event:
        return self.sessions[session_id].append(type_, data, surface_op, sources, ignorable)

    def append_many(self, session_id: str, drafts: Sequence[Mapping[str, Any]]) -> list[dsh.Event]:
        session = self.sessions[session_id]
        before = len(session)
        try:
            return [self.append(session_id, *_fields(d)) for d in drafts]
        except dsh.SessionError:
            # All or nothing, as the writer does: the log before the command, restored.
            self.sessions[session_id] = _rebuilt(session, before)
            raise

    def fork(self, parent_id: str, child_id: str, at: int | None) -> None:
        self.sessions[child_id] = self.sessions[parent_id].fork(child_id, at)

    def read(self, session_id: str) -> dsh.Session:
        return self.sessions[session_id]


class Files(InProcess):
    """The file store: appends go to the store's sessions, reads come back from the files."""

    name = "file-store"

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.stores: dict[bool, FileStore] = {}

    def _store(self, invariants: bool) -> FileStore:
        if invariants not in self.stores:
            self.stores[invariants] = FileStore(
                self.directory / str(invariants), invariants=invariants
            )
        return self.stores[invariants]

    def create(self, session_id: str, invariants: bool) -> None:
        self.sessions[session_id] = self._store(invariants).create(session_id)

    def append_many(self, session_id: str, drafts: Sequence[Mapping[str, Any]]) -> list[dsh.Event]:
        # The store has no commands: all or nothing is checked on a copy first.
        scratch = _rebuilt(self.sessions[session_id], len(self.sessions[session_id]))
        for d in drafts:
            scratch.append(*_fields(d))
        return [self.append(session_id, *_fields(d)) for d in drafts]

    def fork(self, parent_id: str, child_id: str, at: int | None) -> None:
        parent = self.sessions[parent_id]
        child = parent.fork(child_id, at)
        self.create(child_id, parent.invariants)
        for ev in child.events():
            self.append(child_id, *_fields(ev.to_json()))

    def read(self, session_id: str) -> dsh.Session:
        session = self.sessions[session_id]
        store = self._store(session.invariants)
        store.flush(session_id)
        _, events = read_jsonl(store.path(session_id))
        # As logged: opening it in a store would add the marker of a reopened log.
        fresh = dsh.Session.create(session_id, invariants=session.invariants)
        return restore(fresh, events, None, mark_end=False)


class Pipeline(Backend):
    """``SessionClient`` appending through a running writer; reads are the writer's. Each
    session's invariants mode goes with its appends (the first one creates it)."""

    name = "pipeline"

    def __init__(self, client: Any) -> None:
        self.client = client
        self.prefix = f"contract-{uuid.uuid4().hex[:8]}-"  # sessions of one run only
        self.modes: dict[str, bool] = {}

    def fresh(self) -> Pipeline:
        """The same pipeline, for another run: sessions of its own."""
        return Pipeline(self.client)

    def create(self, session_id: str, invariants: bool) -> None:
        self.modes[session_id] = invariants

    def _sid(self, session_id: str) -> str:
        return self.prefix + session_id

    def append(
        self,
        session_id: str,
        type_: str,
        data: Any,
        surface_op: Any = None,
        sources: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> dsh.Event:
        event: dsh.Event = self.client.append(
            self._sid(session_id),
            type_,
            data,
            surface_op=surface_op,
            source_event_seqs=sources,
            ignorable=ignorable,
            invariants=self.modes[session_id],
        )
        return event

    def append_many(self, session_id: str, drafts: Sequence[Mapping[str, Any]]) -> list[dsh.Event]:
        events: list[dsh.Event] = self.client.append_many(
            self._sid(session_id), drafts, invariants=self.modes[session_id]
        )
        return events

    def fork(self, parent_id: str, child_id: str, at: int | None) -> None:
        # A fork is a new session whose first events are the parent's, then the marker: the
        # core makes it from what the pipeline committed, the pipeline validates it again.
        child = self.read(parent_id).fork(self._sid(child_id), at)
        self.modes[child_id] = child.invariants  # the parent's
        self.append_many(child_id, [_draft(ev) for ev in child.events()])

    def read(self, session_id: str) -> dsh.Session:
        session: dsh.Session = self.client.read(self._sid(session_id))
        return session


@dataclass
class Run:
    """What a scenario did on one backend."""

    outcomes: list[Outcome] = field(default_factory=list)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)


Modes = Callable[[str], bool]  # session id -> whether its invariants are on


class Driver:
    """Drives one backend through a scenario, recording the outcome of every operation."""

    def __init__(self, backend: Backend, modes: Modes) -> None:
        self.backend = backend
        self.modes = modes
        self.run = Run()
        self._created: set[str] = set()

    def _session(self, session_id: str) -> str:
        if session_id not in self._created:
            self._created.add(session_id)
            self.backend.create(session_id, self.modes(session_id))
        return session_id

    def append(
        self,
        session_id: str,
        type_: str,
        data: Any,
        surface_op: Any = None,
        sources: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> dsh.Event | None:
        sid = self._session(session_id)
        return self._record(
            lambda: [self.backend.append(sid, type_, data, surface_op, sources, ignorable)]
        )

    def append_many(self, session_id: str, drafts: Sequence[Mapping[str, Any]]) -> None:
        sid = self._session(session_id)
        self._record(lambda: self.backend.append_many(sid, drafts))

    def fork(self, parent_id: str, child_id: str, at: int | None) -> None:
        def forked() -> list[dsh.Event]:
            self.backend.fork(parent_id, child_id, at)
            self._created.add(child_id)
            return []

        self._record(forked)

    def _record(self, op: Callable[[], list[dsh.Event]]) -> dsh.Event | None:
        try:
            events = op()
        except dsh.SessionError as exc:
            self.run.outcomes.append(("rejected", type(exc).__name__, exc.code))
            return None
        self.run.outcomes.append(("ok", *(ev.seq for ev in events)))
        return events[0] if events else None

    def finish(self) -> Run:
        for sid in sorted(self._created):
            self.run.sessions[sid] = observed(self.backend.read(sid))
        return self.run


Scenario = Callable[[Driver], None]


def run(backend: Backend, scenario: Scenario, modes: Modes = lambda _: True) -> Run:
    """``modes``: each session's invariants mode."""
    driver = Driver(backend, modes)
    scenario(driver)
    return driver.finish()


def observed(session: dsh.Session) -> dict[str, Any]:
    """Everything a reader can tell about a session, but times (each backend has a clock)."""
    events = [{k: v for k, v in e.to_json().items() if k != "time"} for e in session.events()]
    return {
        "events": events,
        "nodes": list(session.surface.nodes),
        "replace_generation": session.surface.replace_generation,
        "content_generation": session.surface.content_generation,
        "messages": session.derive_messages(),
    }


def assert_same(got: Run, expected: Run, backend: str) -> None:
    for i, (a, b) in enumerate(zip(got.outcomes, expected.outcomes, strict=True)):
        assert a == b, f"{backend}: operation {i}: {a} where the core gives {b}"
    assert got.sessions.keys() == expected.sessions.keys(), backend
    for sid, state in expected.sessions.items():
        for key, value in state.items():
            assert got.sessions[sid][key] == value, f"{backend}: session {sid}: {key} differs"


def _fields(draft: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        draft["type"],
        draft["data"],
        draft.get("surfaceOp"),
        draft.get("sourceEventSeqs"),
        bool(draft.get("ignorable", False)),
    )


def _draft(ev: dsh.Event) -> dict[str, Any]:
    wire = ev.to_json()
    return {k: v for k, v in wire.items() if k not in ("seq", "time")}


def _rebuilt(session: dsh.Session, length: int) -> dsh.Session:
    events = session.events(0, length)
    rebuilt = dsh.Session.create(session.id, invariants=session.invariants)
    for ev in events:
        rebuilt.append(*_fields(ev.to_json()))
    return rebuilt
