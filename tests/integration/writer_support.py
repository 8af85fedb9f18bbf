"""Helpers for the writer tests: event builders, a scripted multi-turn session, and writers
run in-process (a thread) or as `python -m cli writer` subprocesses."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

import dsh
from producers import SessionClient
from producers.writer import Writer
from producers.writer.commands import CommandHandler
from producers.writer.pipeline import Pipeline
from producers.writer.settings import WriterSettings
from schemas import draft
from servicekit import kafka_clients
from servicekit.partitioning import partition_for
from servicekit.settings import KafkaSettings
from tests.support.builders import assistant, system, tool_call, tool_result, user
from tests.support.processes import CliProcess, service_env
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def said(body: str) -> list[dict[str, Any]]:
    """A stream that delivered ``body`` at once."""
    return [{"t": 0, "kind": "text", "text": body}]


# One append: (type, data, surface_op, source_event_seqs) -> committed event; one command of
# several events: list of drafts -> committed events.
Append = Callable[[str, Any, Any, Any], dsh.Event]
AppendMany = Callable[[list[dict[str, Any]]], list[dsh.Event]]


def multi_turn_script(append: Append, append_many: AppendMany) -> None:
    """Two turns with a tool call, then a third that compacts turn 1 into a summary."""
    surface: list[int] = []

    def visible(ev: dsh.Event) -> dsh.Event:
        if ev.surface_op == "append":
            surface.append(ev.seq)
        return ev

    for turn in (1, 2):
        append("turn/start", {"turn": turn}, None, None)
        visible(append("user/message", user(f"u{turn}", f"question {turn}"), "append", None))
        append("step/start", {"turn": turn, "step": 1}, None, None)
        if turn == 1:
            prompt = system(1, 1, mid="sys-1-1", body="be terse")
            visible(append("system/message", prompt, "append", None))
        call = f"c{turn}"
        looking = assistant(turn, 1, f"a-{turn}-1", "let me look", (call,), said("let me look"))
        visible(append("assistant/message", looking, "append", None))
        called = append("tool/call", tool_call(call, turn, 1), None, None)
        visible(append("tool/result", tool_result(call, turn, 1, "42"), "append", [called.seq]))
        append("step/end", {"turn": turn, "step": 1}, None, None)
        append("step/start", {"turn": turn, "step": 2}, None, None)
        answer = assistant(turn, 2, f"a-{turn}-2", f"answer {turn}", (), said(f"answer {turn}"))
        visible(append("assistant/message", answer, "append", None))
        # The end of a turn as one all-or-nothing command.
        append_many(
            [
                draft("step/end", {"turn": turn, "step": 2}),
                draft("turn/end", {"turn": turn, "reason": {"kind": "completed"}}),
            ]
        )
    append("turn/start", {"turn": 3}, None, None)
    append("compaction/start", {"range": "turn 1"}, None, None)
    # Replace turn 1's user message .. its final answer (surface nodes 0..5, the system
    # message among them) with one summary citing every hidden node.
    start, end = surface[0], surface[4]
    hidden = [s for s in surface if start <= s <= end]
    append(
        "user/message",
        user("summary-1", "turn 1 asked a question; the tool said 42"),
        dsh.Replace(start, end),
        hidden,
    )
    append("compaction/end", {"range": "turn 1"}, None, None)
    visible(append("user/message", user("u3", "and now?"), "append", None))
    append("turn/end", {"turn": 3, "reason": {"kind": "completed"}}, None, None)


def run_script_in_process(session: dsh.Session) -> None:
    def append(type_: str, data: Any, op: Any, sources: Any) -> dsh.Event:
        return session.append(type_, data, surface_op=op, source_event_seqs=sources)

    def append_many(drafts: list[dict[str, Any]]) -> list[dsh.Event]:
        return [
            session.append(
                d["type"],
                d["data"],
                surface_op=d.get("surfaceOp"),
                source_event_seqs=d.get("sourceEventSeqs"),
            )
            for d in drafts
        ]

    multi_turn_script(append, append_many)


def without_time(events: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.to_json().items() if k != "time"} for e in events]


def writer_settings(**overrides: Any) -> WriterSettings:
    values: dict[str, Any] = {
        "group_id": f"dsh-writer-{uuid.uuid4().hex[:8]}",
        "metrics_port": 0,
        "session_timeout_ms": 6000,
        "transaction_timeout_ms": 10_000,
        "restore_timeout_ms": 60_000,
        "snapshot_every": 5,
    }
    values.update(overrides)
    return WriterSettings(**values)


@contextmanager
def running_writer(kafka: KafkaSettings, settings: WriterSettings) -> Iterator[Writer]:
    """A writer on a thread of this process, serving every partition before it is yielded."""
    writer = Writer(kafka, settings)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            writer.run()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="writer", daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(writer.owned()) == PARTITIONS or bool(failure), 30, "ownership")
        if failure:
            raise failure[0]
        yield writer
    finally:
        writer.stop()
        thread.join(30)
    if failure:
        raise failure[0]


class WriterProcess(CliProcess):
    """`python -m cli writer` with ``DSH_WRITER_*`` settings, its log in a file the test reads."""

    def __init__(self, kafka: KafkaSettings, log_path: Path, **settings: Any) -> None:
        env = service_env(
            kafka,
            clear=("DSH_KAFKA_", "DSH_WRITER_"),
            **{f"DSH_WRITER_{key.upper()}": str(value) for key, value in settings.items()},
        )
        super().__init__(["writer"], env, log_path)


def stop_mid_batch(
    client: SessionClient, victim: WriterProcess, request_id: str
) -> tuple[str, Future[Any]]:
    """A session of the victim's partitions with three events (``warm-0..2``), then an append
    with ``request_id``, which the victim's failpoint stops it on. Returns the session and
    that append's future."""
    owned = victim.owned() or []
    sid = next(f"s-{i}" for i in range(1000) if partition_for(f"s-{i}", PARTITIONS) in owned)
    for i in range(3):
        client.append(sid, "user/message", user(f"warm-{i}"), surface_op="append")
    held = client.append_async(
        sid, "user/message", user(request_id), surface_op="append", request_id=request_id
    )
    wait_for(victim.stopped, 20, f"the writer stopping itself at {request_id}")
    return sid, held


def split(a: WriterProcess, b: WriterProcess) -> bool:
    """Both writers own partitions, and together all of them."""
    oa, ob = a.owned(), b.owned()
    return bool(oa) and bool(ob) and sorted((oa or []) + (ob or [])) == list(range(PARTITIONS))


def events_end_offsets(kafka: KafkaSettings) -> list[int]:
    """The end (high watermark, uncommitted included) of every events partition."""
    probe = kafka_clients.reader(kafka, "read_uncommitted")
    try:
        topic = kafka.topic("events")
        return [
            probe.get_watermark_offsets(TopicPartition(topic, p), 10, False)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        probe.close()


# -- commit probes (the overlap and freeze tests) --------------------------------------

SESSIONS = 6
APPENDS = 30


class CommitProbe:
    """Wraps ``Pipeline._commit`` (slowed down, so the overlap is wide enough to see) and
    ``CommandHandler.handle``, recording when each ran; optionally fails one commit with
    ``error`` before it reaches the broker (its transaction stays open there)."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        fail_commit: int | None = None,
        error: int = KafkaError._TIMED_OUT,
    ) -> None:
        self.commits: list[tuple[float, float]] = []
        self.handled: list[float] = []
        self._lock = threading.Lock()
        self._count = 0
        commit, handle = Pipeline._commit, CommandHandler.handle

        def slow_commit(pipeline: Pipeline, producer: Any, *args: Any) -> None:
            with self._lock:
                self._count += 1
                n = self._count
            started = time.monotonic()
            time.sleep(0.05)
            if n == fail_commit:
                raise KafkaException(KafkaError(error, "failed on purpose"))
            commit(pipeline, producer, *args)
            self.commits.append((started, time.monotonic()))

        def timed_handle(handler: CommandHandler, *args: Any) -> None:
            self.handled.append(time.monotonic())
            handle(handler, *args)

        monkeypatch.setattr(Pipeline, "_commit", slow_commit)
        monkeypatch.setattr(CommandHandler, "handle", timed_handle)

    def handled_while_committing(self) -> int:
        return sum(any(a < t < b for a, b in self.commits) for t in self.handled)


def load_in_order(topics: KafkaSettings, sessions: list[str]) -> None:
    """Each session appends one after another on its own thread, so commands keep coming
    while transactions commit; expected_seq turns any reordering or double append into a
    ConflictError."""
    with SessionClient(settings=topics, timeout=30) as client:

        def appends(sid: str) -> None:
            for i in range(APPENDS):
                ev = client.append(
                    sid, "user/message", user(f"u{i}"), surface_op="append", expected_seq=i
                )
                assert ev.seq == i, sid

        with ThreadPoolExecutor(len(sessions)) as pool:
            for done in [pool.submit(appends, sid) for sid in sessions]:
                done.result(120)
        for sid in sessions:
            ids = [e.data["id"] for e in client.read_log(sid).events()]
            assert ids == [f"u{i}" for i in range(APPENDS)], sid
