"""The OpenAI Agents SDK session adapter against a real writer: the SDK's own Runner drives it
(with a scripted model: no network), and the log it leaves is a valid dsh session."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import OpenAIResponsesCompactionSession, Session
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import dsh
from producers import SessionClient, draft
from producers.agents_session import DshAgentsSession, UnsupportedItemError
from producers.errors import AppendTimeoutError
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import running_writer, writer_settings
from tests.support.builders import assistant, user

set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise


def _message(text: str, mid: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=mid,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def _call(call_id: str, city: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        type="function_call",
        call_id=call_id,
        name="get_weather",
        arguments=json.dumps({"city": city}),
        status="completed",
    )


class ScriptedModel(Model):
    """Answers from a script and records every input the Runner sent it."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = outputs
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any):
        self.inputs.append(json.loads(json.dumps(input, default=str)))
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture
def client(topics: KafkaSettings) -> Iterator[SessionClient]:
    with running_writer(topics, writer_settings()), SessionClient(settings=topics) as c:
        yield c
    # The SDK's run results keep the session, and with it the closed client's librdkafka
    # handle, which would retry connecting to the servers after they stop at the end.
    gc.collect()


def _replace_one(client: SessionClient, session_id: str, event: dsh.Event, data: Any) -> None:
    """Another service replaces ``event`` on the surface with an event of its type, citing it."""
    client.append(
        session_id,
        event.type,
        data,
        surface_op=dsh.Replace(event.seq, event.seq),
        source_event_seqs=[event.seq],
    )


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_runner_keeps_its_memory_in_the_log(client: SessionClient) -> None:
    model = ScriptedModel(
        [
            [_call("call_1", "Paris")],
            [_message("It is sunny in Paris.", "msg_1")],
            [_message("Still sunny, as far as I know.", "msg_2")],
        ]
    )
    agent = Agent(
        name="weather",
        instructions="Be brief.",
        model=model,
        tools=[get_weather],
        model_settings=ModelSettings(),
    )
    session = DshAgentsSession("agents-1", client, model="scripted")
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    config = RunConfig(tracing_disabled=True)

    first = _run(Runner.run(agent, "Weather in Paris?", session=session, run_config=config))
    assert first.final_output == "It is sunny in Paris."
    second = _run(Runner.run(agent, "And tomorrow?", session=session, run_config=config))
    assert second.final_output == "Still sunny, as far as I know."

    # The second run's model input is the first run's memory, read back from the session.
    sent = model.inputs[2]
    assert [i.get("type", "message") for i in sent] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    assert sent[1]["call_id"] == "call_1" and sent[2]["output"] == "sunny in Paris"
    assert sent[-1]["role"] == "user"

    # The log, restored from the topic, is a valid session of two turns.
    log = client.read("agents-1")
    types = [e.type for e in log.events()]
    assert types.count("turn/start") == 2 and types.count("turn/end") == 1
    assert types[:4] == ["turn/start", "user/message", "step/start", "assistant/message"]
    assert "tool/call" in types and "tool/result" in types
    result = next(e for e in log.events() if e.type == "tool/result")
    call = next(e for e in log.events() if e.type == "tool/call")
    assert result.to_json()["sourceEventSeqs"] == [call.seq]
    fresh = DshAgentsSession("agents-1", client)
    assert _run(fresh.get_items()) == _run(session.get_items())
    assert len(_run(session.get_items(limit=2))) == 2


def test_pop_and_clear_hide_items_from_the_model_but_keep_them_in_the_log(
    client: SessionClient,
) -> None:
    session = DshAgentsSession("agents-2", client)
    items: list[TResponseInputItem] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": [{"type": "input_text", "text": "oops, typo"}]},
    ]
    _run(session.add_items(items))
    assert _run(session.get_items()) == items  # exactly as added

    popped = _run(session.pop_item())
    assert popped == {"role": "user", "content": [{"type": "input_text", "text": "oops, typo"}]}
    assert len(_run(session.get_items())) == 3
    log = client.read("agents-2")
    replace = log.event(len(log) - 1)
    assert replace.type == "system/message" and isinstance(replace.surface_op, dsh.Replace)
    assert "oops, typo" in json.dumps([e.to_json() for e in log.transcript()])

    _run(session.clear_session())
    assert _run(session.get_items()) == []
    assert _run(session.pop_item()) is None
    log = client.read("agents-2")
    assert log.derive_messages() == []
    assert sum(e.type == "user/message" for e in log.transcript()) == 2  # nothing lost
    compaction = [e.type for e in log.events() if e.type.startswith("compaction/")]
    assert compaction == ["compaction/start", "compaction/end"]

    # The session goes on after a clear.
    _run(session.add_items([{"role": "user", "content": "again"}]))
    assert _run(session.get_items()) == [{"role": "user", "content": "again"}]


def test_a_compaction_by_another_service_is_what_the_sdk_sends_next(
    client: SessionClient,
) -> None:
    session = DshAgentsSession("agents-3", client)
    _run(
        session.add_items(
            [
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"},
            ]
        )
    )
    log = client.read("agents-3")
    first, second = log.surface.nodes[0], log.surface.nodes[1]
    summary = {
        "id": "summary",
        "role": "user",
        "content": [{"type": "text", "text": "q1 was answered with a1"}],
        "source": {"kind": "plugin", "plugin": "compaction"},
    }
    client.append(
        "agents-3",
        "user/message",
        summary,
        surface_op=dsh.Replace(first, second),
        source_event_seqs=[first, second],
    )
    # No private copy: the next read is the log as it is, with no error and no retry.
    assert _run(session.get_items())[0]["content"][0]["text"] == "q1 was answered with a1"
    _run(session.add_items([{"role": "assistant", "content": "a2"}]))
    assert [i["content"] for i in _run(session.get_items())][-1] == "a2"


def test_an_item_without_a_faithful_event_is_refused_whole(client: SessionClient) -> None:
    session = DshAgentsSession("agents-4", client)
    with pytest.raises(UnsupportedItemError):
        _run(
            session.add_items(
                [
                    {"role": "user", "content": "search the web"},
                    {"type": "web_search_call", "id": "ws_1", "status": "completed"},  # type: ignore[list-item]
                ]
            )
        )
    assert len(client.read("agents-4")) == 0  # nothing of the batch was sent


def test_another_instances_append_is_on_the_next_read(client: SessionClient) -> None:
    """Two workers on one session: A appends, B's next get_items() returns it, with no error
    and no retry (one read of the log per call)."""
    reads: list[str] = []

    def counted(session_id: str) -> dsh.Session:
        reads.append(session_id)
        return client.read(session_id)

    a = DshAgentsSession("agents-5", client)
    b = DshAgentsSession("agents-5", client, reader=counted)
    _run(a.add_items([{"role": "user", "content": "from A"}]))
    assert _run(b.get_items()) == [{"role": "user", "content": "from A"}]

    _run(a.add_items([{"role": "assistant", "content": "A again"}]))
    reads.clear()
    assert [i["content"] for i in _run(b.get_items())] == ["from A", "A again"]
    assert len(reads) == 1

    # And the other way round: B's append (planned on its own fresh read) is A's next read.
    _run(b.add_items([{"role": "user", "content": "from B"}]))
    assert [i["content"] for i in _run(a.get_items())] == ["from A", "A again", "from B"]
    assert _run(a.pop_item()) == {"role": "user", "content": "from B"}
    assert [i["content"] for i in _run(b.get_items())] == ["from A", "A again"]


def test_a_session_made_with_invariants_off_is_read_in_its_own_mode(
    client: SessionClient,
) -> None:
    """A bare session (made with invariants off, as `dsh import --invariants off` makes one)
    may hold what the turn rules refuse, here an assistant message outside any turn: the
    adapter reads it in its own mode, not as a default session it would not restore into."""
    client.append_many(
        "agents-bare",
        [
            draft("user/message", user("u1", "hello"), surface_op="append"),
            draft("assistant/message", assistant(mid="a1", body="hi"), surface_op="append"),
        ],
        invariants=False,
    )
    items = _run(DshAgentsSession("agents-bare", client).get_items())
    assert [i["role"] for i in items] == ["user", "assistant"]


def test_an_append_whose_reply_was_lost_is_sent_again_and_commits_once(
    client: SessionClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer committed, its reply did not come in time: the adapter sends the same
    command again under its request id, gets the committed events back, and the items are
    in the log once."""
    real = client.append_many
    request_ids: list[str] = []

    def reply_lost_once(session_id: str, drafts: Any, **kwargs: Any) -> Any:
        request_ids.append(kwargs["request_id"])
        events = real(session_id, drafts, **kwargs)
        if len(request_ids) == 1:
            raise AppendTimeoutError("no reply in time", request_id=kwargs["request_id"])
        return events

    monkeypatch.setattr(client, "append_many", reply_lost_once)
    session = DshAgentsSession("agents-lost-reply", client)
    _run(session.add_items([{"role": "user", "content": "once"}]))
    assert len(request_ids) == 2 and request_ids[0] == request_ids[1]
    assert _run(DshAgentsSession("agents-lost-reply", client).get_items()) == [
        {"role": "user", "content": "once"}
    ]


def test_a_read_asks_the_writer_only_for_what_came_since(
    client: SessionClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read costs what changed since this instance's last read or write, not the session:
    the writer is asked for the tail only, and another instance's append is in it."""
    asked: list[int] = []
    real = client.read_events

    def counted(session_id: str, from_seq: int = 0, timeout: float | None = None) -> Any:
        asked.append(from_seq)
        return real(session_id, from_seq, timeout)

    real_whole = client.read

    def whole(session_id: str, timeout: float | None = None, interpreters: Any = None) -> Any:
        asked.append(0)  # the first read of an instance: the whole session, with its mode
        return real_whole(session_id, timeout, interpreters)

    monkeypatch.setattr(client, "read_events", counted)
    monkeypatch.setattr(client, "read", whole)
    a = DshAgentsSession("agents-tail", client)
    b = DshAgentsSession("agents-tail", client)
    _run(a.add_items([{"role": "user", "content": f"a{i}"} for i in range(3)]))
    assert asked == [0]  # nothing known yet: the whole (empty) session
    _run(a.add_items([{"role": "user", "content": "a3"}]))
    assert asked == [0]  # planned on what it committed: no read at all
    known_to_a = len(real("agents-tail"))
    _run(b.add_items([{"role": "user", "content": "from b"}]))
    asked.clear()
    items = _run(a.get_items())
    assert [i["content"] for i in items] == ["a0", "a1", "a2", "a3", "from b"]
    assert asked == [known_to_a] and known_to_a > 0  # the tail after a's events only


ROUND_TRIP: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": [{"type": "input_text", "text": "Use metric units."}]},
    {"role": "user", "content": "Hello"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "and this"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "low"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "the user wants weather"}],
        "encrypted_content": "opaque",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Sunny.", "annotations": [], "logprobs": []},
            {"type": "refusal", "refusal": "No more."},
        ],
    },
]


def test_items_come_back_exactly_as_added_and_the_log_stays_vocabulary(
    client: SessionClient,
) -> None:
    session = DshAgentsSession("agents-6", client)
    _run(session.add_items(ROUND_TRIP))
    back = _run(session.get_items())
    assert json.dumps(back) == json.dumps(ROUND_TRIP)  # byte-equal, key order included
    assert _run(session.get_items(limit=3)) == ROUND_TRIP[-3:]

    # The log is vocabulary the core validates (a restore re-checks every event), and every
    # projection reads it: the model's messages, the human transcript.
    log = dsh.Session.from_restore(
        "agents-6", [e.to_json() for e in client.read("agents-6").events()]
    )
    texts = [b.get("text") for m in log.derive_messages() for b in m["content"]]
    assert texts[:3] == ["Be brief.", "Use metric units.", "Hello"]
    assert [m["role"] for m in log.derive_messages()][-1] == "assistant"
    assert len(log.transcript()) == len(ROUND_TRIP)

    # A node whose message another service replaced is mapped from the new message.
    user = next(e for e in log.events() if e.type == "user/message")
    summary = {
        "id": "s",
        "role": "user",
        "content": [{"type": "text", "text": "summary"}],
        "source": {"kind": "plugin", "plugin": "compaction"},
    }
    _replace_one(client, "agents-6", user, summary)
    assert _run(session.get_items())[2] == {
        "role": "user",
        "content": [{"type": "input_text", "text": "summary"}],
    }


def test_one_instance_from_many_threads_and_event_loops(client: SessionClient) -> None:
    """Each thread runs its own event loop on the same two instances of one session: nothing
    hangs, nothing is lost, and the log stays valid."""
    shared = DshAgentsSession("agents-7", client)
    other = DshAgentsSession("agents-7", client)

    def worker(n: int) -> None:
        session = shared if n % 2 else other
        asyncio.run(session.add_items([{"role": "user", "content": f"m{n}"}]))
        asyncio.run(session.get_items())

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    got = sorted(i["content"] for i in _run(shared.get_items()))
    assert got == sorted(f"m{n}" for n in range(8))


@function_tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def test_runner_resumes_an_interrupted_run_from_the_session(client: SessionClient) -> None:
    """A run stopped for a tool approval resumes from its state: the SDK matches the session's
    items against what it already saved, so nothing is saved twice."""
    model = ScriptedModel(
        [
            [
                ResponseFunctionToolCall(
                    id="fc_del",
                    type="function_call",
                    call_id="call_del",
                    name="delete_file",
                    arguments=json.dumps({"path": "a.txt"}),
                    status="completed",
                )
            ],
            [_message("Deleted a.txt.", "msg_done")],
        ]
    )
    agent = Agent(name="files", model=model, tools=[delete_file])
    session = DshAgentsSession("agents-8", client, model="scripted")
    config = RunConfig(tracing_disabled=True)

    first = _run(Runner.run(agent, "Delete a.txt", session=session, run_config=config))
    assert first.interruptions
    state = first.to_state()
    state.approve(first.interruptions[0])
    resumed = _run(Runner.run(agent, state, session=session, run_config=config))
    assert resumed.final_output == "Deleted a.txt."

    items = _run(session.get_items())
    kinds = [i.get("type", "message") for i in items]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    assert items[2]["output"] == "deleted a.txt"
    assert model.inputs[-1][:2] == [items[0], items[1]]

    # Rewind: pop the answer and the tool round, the model then sees the question only.
    for _ in range(3):
        _run(session.pop_item())
    assert _run(session.get_items()) == [items[0]]


def test_a_tool_result_rewritten_by_another_service_is_what_the_sdk_gets(
    client: SessionClient,
) -> None:
    """A redaction (a tool/result replace) may change only the result's content, so the event
    still carries the item as first added: the SDK must get the rewritten output, on the
    instance that added it and on a fresh one, with the item's other fields kept."""
    session = DshAgentsSession("agents-redact", client)
    call = {"type": "function_call", "call_id": "c1", "name": "env", "arguments": "{}"}
    secret = {
        "type": "function_call_output",
        "call_id": "c1",
        "output": "SECRET api_key=sk-123",
        "id": "fco_1",
    }
    _run(session.add_items([{"role": "user", "content": "env?"}, call, secret]))  # type: ignore[list-item]
    assert _run(session.get_items())[-1] == secret

    result = next(e for e in client.read("agents-redact").events() if e.type == "tool/result")
    data = json.loads(json.dumps(result.to_json()["data"]))
    data["message"]["content"][0]["content"] = [{"type": "text", "text": "[redacted]"}]
    _replace_one(client, "agents-redact", result, data)
    redacted = {**secret, "output": "[redacted]"}
    assert _run(session.get_items())[-1] == redacted
    assert _run(session.get_items(limit=1)) == [redacted]
    fresh = DshAgentsSession("agents-redact", client)
    assert _run(fresh.get_items()) == _run(session.get_items())
    assert "sk-123" not in json.dumps(_run(fresh.get_items()))


def _stale_pair(client: SessionClient, session_id: str) -> tuple[DshAgentsSession, ...]:
    """A knows the session as empty; B then appends "hi"."""
    a = DshAgentsSession(session_id, client)
    b = DshAgentsSession(session_id, client)
    assert _run(a.get_items()) == []
    _run(b.add_items([{"role": "user", "content": "hi"}]))
    return a, b


# Writes are planned on what an instance last knew; where that plan is empty (nothing to pop or
# clear) or refused, another instance's append since must count, as if it had read it.


def test_clear_on_a_stale_copy_clears_what_another_instance_added(client: SessionClient) -> None:
    a, b = _stale_pair(client, "agents-stale-clear")
    _run(a.clear_session())
    assert _run(b.get_items()) == []


def test_pop_on_a_stale_copy_pops_what_another_instance_added(client: SessionClient) -> None:
    a, b = _stale_pair(client, "agents-stale-pop")
    assert _run(a.pop_item()) == {"role": "user", "content": "hi"}
    assert _run(b.get_items()) == []


def test_a_result_for_a_call_another_instance_added_is_accepted(client: SessionClient) -> None:
    a = DshAgentsSession("agents-stale-result", client)
    b = DshAgentsSession("agents-stale-result", client)
    _run(a.add_items([{"role": "user", "content": "grep"}]))
    call = {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": "{}"}
    _run(b.add_items([call]))  # type: ignore[list-item]
    output = {"type": "function_call_output", "call_id": "c1", "output": "found"}
    _run(a.add_items([output]))  # type: ignore[list-item]
    assert [i.get("type", "message") for i in _run(b.get_items())] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    # A refusal that stands on the latest state is still raised, with nothing appended.
    before = len(client.read("agents-stale-result"))
    with pytest.raises(UnsupportedItemError):
        _run(a.add_items([{**output, "call_id": "c9"}]))  # type: ignore[list-item]
    assert len(client.read("agents-stale-result")) == before


def test_a_negative_limit_is_no_limit_as_in_sqlite_session(client: SessionClient) -> None:
    session = DshAgentsSession("agents-negative-limit", client)
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]
    _run(session.add_items(items))
    assert _run(session.get_items(limit=-1)) == items
    limited = DshAgentsSession("agents-negative-limit", client, session_settings={"limit": -1})
    assert _run(limited.get_items()) == items


def test_a_popped_tool_call_can_be_added_again(client: SessionClient) -> None:
    """A step dispatches a call once: the call added again after its pop is the next step."""
    session = DshAgentsSession("agents-pop-call", client)
    call: Any = {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": "{}"}
    items: list[Any] = [{"role": "user", "content": "grep"}, call]
    _run(session.add_items(items))
    assert _run(session.pop_item()) == call
    _run(session.add_items([call]))
    assert _run(session.get_items()) == items
    output: Any = {"type": "function_call_output", "call_id": "c1", "output": "found"}
    _run(session.add_items([output]))
    assert _run(session.get_items()) == [*items, output]


def test_a_popped_tool_result_comes_back_only_with_its_call(client: SessionClient) -> None:
    """A call has one result in the log and a popped one stays there, so the result alone is
    refused, typed, with nothing appended; popped with its call, both can be added again."""
    session = DshAgentsSession("agents-pop-result", client)
    call: Any = {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": "{}"}
    output: Any = {"type": "function_call_output", "call_id": "c1", "output": "found"}
    items: list[Any] = [{"role": "user", "content": "grep"}, call, output]
    _run(session.add_items(items))
    assert _run(session.pop_item()) == output
    before = len(client.read("agents-pop-result"))
    with pytest.raises(UnsupportedItemError, match="already has a result"):
        _run(session.add_items([output]))
    assert len(client.read("agents-pop-result")) == before
    assert _run(session.pop_item()) == call
    _run(session.add_items([call, output]))
    assert _run(session.get_items()) == items


def _compactor(session: DshAgentsSession, output: list[Any]) -> OpenAIResponsesCompactionSession:
    """The SDK's compaction wrapper around ``session``, its responses.compact answering
    ``output`` (no network)."""

    async def compact(**kwargs: Any) -> Any:
        return SimpleNamespace(output=output, usage=None)

    stub: Any = SimpleNamespace(responses=SimpleNamespace(compact=compact))
    return OpenAIResponsesCompactionSession(session.session_id, session, client=stub)


HISTORY: list[Any] = [
    {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "q2"},
]


def test_the_sdks_compaction_output_is_refused_before_anything_is_appended(
    client: SessionClient,
) -> None:
    """responses.compact answers with a `compaction` item, which has no faithful event: the
    replacement is refused whole, the history neither cleared nor logged again."""
    session = DshAgentsSession("agents-sdk-compaction", client)
    _run(session.add_items(HISTORY))
    before = len(client.read("agents-sdk-compaction"))
    summary = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "s"}]}
    compactor = _compactor(session, [summary, {"type": "compaction", "encrypted_content": "x"}])
    with pytest.raises(UnsupportedItemError, match="compaction"):
        _run(compactor.run_compaction({"force": True}))
    assert len(client.read("agents-sdk-compaction")) == before
    assert _run(session.get_items()) == HISTORY


def test_the_sdks_compaction_replaces_the_history_in_one_command(client: SessionClient) -> None:
    session = DshAgentsSession("agents-sdk-compaction-ok", client)
    _run(session.add_items(HISTORY))
    summary = {"role": "user", "content": [{"type": "input_text", "text": "q1 got a1; q2?"}]}
    _run(_compactor(session, [summary]).run_compaction({"force": True}))
    items = _run(DshAgentsSession("agents-sdk-compaction-ok", client).get_items())
    assert [i["content"] for i in items] == [summary["content"]]
    log = client.read("agents-sdk-compaction-ok")
    assert sum(e.type == "user/message" for e in log.transcript()) == 3  # nothing lost
