"""The OpenAI Agents SDK session adapter against a real writer: the SDK's own Runner drives it
(with a scripted model: no network), and the log it leaves is a valid dsh session."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import Session
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import dsh
from producers import SessionClient
from producers.agents_session import DshAgentsSession, UnsupportedItemError
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import running_writer, writer_settings

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
    assert [i["content"] for i in _run(session.get_items())][:3] == [
        "You are terse.",
        [{"type": "input_text", "text": "hello"}],
        "hi",
    ]

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
    assert _run(session.get_items()) == [
        {"role": "user", "content": [{"type": "input_text", "text": "again"}]}
    ]


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
    # This object's copy is behind: its next append is refused (expected seq), never forks.
    with pytest.raises(dsh.ValidationError) as info:
        _run(session.add_items([{"role": "assistant", "content": "a2"}]))
    assert info.value.code == "EXPECTED_SEQ_MISMATCH"
    # It re-reads the log on next use: the model now sees the summary, and appends go on.
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
