"""The CLI prints each message the same way in `dsh show`, `dsh tail` and `dsh demo`."""

from __future__ import annotations

from cli.render import event_summary, message_line, seq_list


def test_a_message_prints_its_text_calls_and_results_in_one_line() -> None:
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "checking\n  the weather"},
            {"type": "tool-call", "name": "weather", "arguments": {"city": "Oslo"}},
            {
                "type": "tool-result",
                "toolCallId": "c1",
                "isError": True,
                "content": [{"type": "text", "text": "timeout"}, {"type": "image"}],
            },
            {"type": "thinking"},
        ],
    }
    assert message_line(message) == (
        "checking the weather → weather({'city': 'Oslo'}) ← timeout [image] (error) [thinking]"
    )


def test_a_long_line_is_clipped_to_its_width() -> None:
    line = message_line({"content": [{"type": "text", "text": "x" * 200}]}, width=20)
    assert line == "x" * 19 + "…"


def test_an_event_without_a_message_prints_its_data() -> None:
    assert event_summary({"type": "turn/start", "data": {"turn": 2}}) == '{"turn": 2}'
    user = {
        "type": "user/message",
        "data": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    }
    assert event_summary(user) == "hi"


def test_a_long_list_of_nodes_prints_its_count_and_ends() -> None:
    assert seq_list([0, 3, 4]) == "3 nodes [0, 3, 4]"
    assert seq_list([7]) == "1 node [7]"
    big = seq_list(list(range(66_668)))
    assert big == "66,668 nodes [0, 1, 2, 3, 4, … 66663, 66664, 66665, 66666, 66667]"
