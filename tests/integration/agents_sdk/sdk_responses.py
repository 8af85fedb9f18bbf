"""The helper of the SDK's ``tests/test_responses.py`` (openai-agents 0.24.0, MIT licence) that
the ported tests use, copied unchanged; served as ``tests.test_responses`` by ./conftest.py."""

from __future__ import annotations

from openai.types.responses import ResponseOutputItem, ResponseOutputMessage, ResponseOutputText


def get_text_message(content: str) -> ResponseOutputItem:
    return ResponseOutputMessage(
        id="1",
        type="message",
        role="assistant",
        content=[ResponseOutputText(text=content, type="output_text", annotations=[], logprobs=[])],
        status="completed",
    )
