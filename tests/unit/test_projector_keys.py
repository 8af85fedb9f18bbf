"""Every Redis key of one session hashes to one Redis Cluster slot (the apply scripts touch them
together), whatever the session id holds, and no two sessions share a key."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from projectors.keys import Keys

KEYS = Keys()
SESSION_IDS = st.one_of(st.text(max_size=12), st.text(alphabet="{}x:#", max_size=8))


def _keys_of(session_id: str) -> list[str]:
    return [
        KEYS.meta("surface", session_id),
        KEYS.rebuilding("transcript", session_id),
        KEYS.session(session_id, "audit", "sources"),
    ]


@given(SESSION_IDS)
def test_every_key_of_a_session_is_in_one_slot(session_id: str) -> None:
    slots = {key_slot(key.encode()) for key in _keys_of(session_id)}
    assert len(slots) == 1, (session_id, _keys_of(session_id))


@given(SESSION_IDS, SESSION_IDS)
def test_two_sessions_never_share_a_key(first: str, second: str) -> None:
    if first != second:
        assert KEYS.meta("surface", first) != KEYS.meta("surface", second)


def test_an_id_with_a_usable_tag_keeps_its_key_names() -> None:
    """Keys already in Redis stay where they are."""
    assert KEYS.meta("surface", "s-1") == "dsh:{s-1}:surface:meta"
    assert KEYS.meta("surface", "a}b") == "dsh:{a}b}:surface:meta"
