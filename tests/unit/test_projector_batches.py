"""A projector batch decided without Kafka or Redis (``projectors/runtime/batches.py``): records
planned against cached session states into apply-script calls, and Redis' replies settled into
applied, duplicate, gap (rebuild) or blocked."""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from typing import Any

import pytest
import redis

from dsh.event import Event
from dsh.fold import SurfaceFold
from projectors.errors import PoisonRecordError
from projectors.keys import Keys
from projectors.records import Poison, Record
from projectors.runtime.batches import APPLIED, BLOCKED, DUPLICATE, GAP, Planner
from projectors.runtime.poison import DeadLetter
from projectors.runtime.sessions import Entry
from projectors.scripts import APPLY, BLOCK
from projectors.transcript import TranscriptProjection

SID, OTHER = "s-1", "s-2"
PARTITION = 3
TOPIC = "t.events"
PROJECTION = TranscriptProjection(Keys())
PROJECTION.recent_sessions = 0  # the recent index's commands: their own test, below


def record(seq: int, sid: str = SID, type_: str = "turn/start") -> Record:
    event = Event.from_json({"type": type_, "seq": seq, "time": 0, "data": {"turn": 1}})
    return Record(sid, event, PARTITION, 100 + seq)


POISON = Poison(SID, PoisonRecordError("bad bytes"), SID.encode(), b"x", PARTITION, 99)
KEYLESS = Poison(None, PoisonRecordError("no key"), None, b"x", PARTITION, 98)


def planner(applied: int = -1, blocked: bool = False) -> tuple[Planner[Any], Counter[str]]:
    """A planner whose cache holds SID as Redis would load it at ``applied``, and OTHER new."""
    cache: OrderedDict[str, Entry[Any]] = OrderedDict()
    cache[SID] = Entry(PROJECTION.load([str(applied).encode(), []]), blocked, partition=PARTITION)
    cache[OTHER] = Entry(PROJECTION.fresh(), partition=PARTITION)
    stats: Counter[str] = Counter()
    return Planner(PROJECTION, cache, stats, TOPIC), stats


def kind(command: tuple[Any, ...]) -> str:
    if command[0] == "EVALSHA":
        return {APPLY.sha: "apply", BLOCK.sha: "block"}[command[1]]
    return str(command[0])


def seq_of(command: tuple[Any, ...]) -> int:
    """The seq argument of an apply-script call: right after its keys."""
    return int(command[3 + command[2]])


@pytest.mark.parametrize(
    ("applied", "blocked", "seqs", "planned", "counts", "rebuild"),
    [
        # The next seqs: one apply-script call each, planned on the state the last one left.
        (-1, False, [0, 1, 2], [0, 1, 2], {}, {}),
        (2, False, [3], [3], {}, {}),
        # At or below what the state holds: counted, never sent.
        (2, False, [1, 2, 3], [3], {"duplicate": 2}, {}),
        # Beyond the next: the session is rebuilt; its later records wait for that (uncounted).
        (2, False, [5, 6], [], {"gap": 1}, {PARTITION: {SID}}),
        (2, False, [3, 5, 6], [3], {"gap": 1}, {PARTITION: {SID}}),
        # A blocked session's records are counted, not applied.
        (2, True, [3, 4], [], {"blocked": 2}, {}),
    ],
)
def test_records_are_planned_against_the_cached_state(
    applied: int,
    blocked: bool,
    seqs: list[int],
    planned: list[int],
    counts: dict[str, int],
    rebuild: dict[int, set[str]],
) -> None:
    batches, stats = planner(applied, blocked)
    items = [record(seq) for seq in seqs]
    plan = batches.plan(items)
    assert [seq_of(c) for c in plan.commands] == planned
    assert [kind(c) for c in plan.commands] == ["apply"] * len(planned)
    assert plan.queued == [i for i in items if i.seq in planned]
    assert stats == Counter(counts)
    assert plan.rebuild == rebuild
    assert plan.dead == []


def test_an_apply_call_names_the_script_the_keys_the_seq_and_the_ops() -> None:
    batches, _ = planner(2)
    plan = batches.plan([record(3)])
    (command,) = plan.commands
    keys = PROJECTION.all_keys(SID)
    assert command[:3] == ("EVALSHA", APPLY.sha, len(keys))
    assert list(command[3 : 3 + len(keys)]) == keys
    state = PROJECTION.load([b"2", []])
    assert list(command[3 + len(keys) :]) == [3, *PROJECTION.plan(state, record(3).event)]


def test_a_second_batch_is_planned_on_the_states_the_first_left() -> None:
    """Two batches in hand: N+1 is planned before Redis answered N."""
    batches, _ = planner(2)
    first = batches.plan([record(3), record(0, OTHER)])
    second = batches.plan([record(4), record(1, OTHER)])
    assert [seq_of(c) for c in first.commands + second.commands] == [3, 0, 4, 1]


@pytest.mark.parametrize(
    ("items", "kinds", "counts", "blocked"),
    [
        # Undecodable: a dead letter, and the session blocked in this batch already.
        ([POISON, record(3)], ["block", "SADD"], {"blocked": 1}, True),
        ([record(3), POISON], ["apply", "block", "SADD"], {}, True),
        ([POISON, record(0, OTHER)], ["block", "SADD", "apply"], {}, True),
        # Without a key there is no session to block: a dead letter only.
        ([KEYLESS, record(3)], ["apply"], {}, False),
    ],
)
def test_a_poison_record_is_a_dead_letter_and_blocks_its_session(
    items: list[Record | Poison], kinds: list[str], counts: dict[str, int], blocked: bool
) -> None:
    batches, stats = planner(2)
    plan = batches.plan(items)
    assert [kind(c) for c in plan.commands] == kinds
    poisons = [i for i in items if isinstance(i, Poison)]
    assert plan.dead == [DeadLetter(p) for p in poisons]
    assert len(plan.queued) == len(plan.commands)
    assert stats == Counter(counts)
    assert batches.cache[SID].blocked is blocked
    if blocked:
        (block, sadd) = [c for c in plan.commands if kind(c) in ("block", "SADD")]
        assert block[3:5] == (PROJECTION.keys.meta("transcript", SID), -1)
        reason = json.loads(block[5])
        assert reason["code"] == "POISON_RECORD" and reason["source"] == f"{TOPIC}[3]@99"
        assert sadd == ("SADD", PROJECTION.keys.blocked("transcript"), SID)


def test_a_record_the_rules_refuse_blocks_its_session_at_its_seq() -> None:
    batches, stats = planner(2)
    refused = record(3, type_="user/message")  # {"turn": 1} is not a message
    plan = batches.plan([refused, record(4)])
    assert [kind(c) for c in plan.commands] == ["block", "SADD"]
    assert plan.commands[0][4] == 3
    (letter,) = plan.dead
    assert letter.record is refused and letter.seq == 3
    assert letter.poison.error.code == "INVALID_DATA" and letter.poison.value is None
    assert stats == Counter({"blocked": 1})  # seq 4 meets a blocked session
    state = batches.cache[SID].state
    assert isinstance(state, SurfaceFold) and state.next_seq == 3  # the refusal left it alone


def test_a_message_projection_of_a_type_the_writer_registered_is_planned_not_refused() -> None:
    """The transcript runs no interpreter: a projection type the writer had one for (and so
    took without ``ignorable``) is applied, not a reason to block the session."""
    batches, stats = planner(2)
    plan = batches.plan([record(3, type_="vendor/redact"), record(4)])
    assert [kind(c) for c in plan.commands] == ["apply", "apply"]
    assert plan.dead == [] and stats == Counter()


@pytest.mark.parametrize(
    ("reply", "counts", "cached", "blocked", "rebuild"),
    [
        ([APPLIED, 3], {"applied": 1}, True, False, {}),
        # Another process got there first: the cached state is not Redis's any more.
        ([DUPLICATE, 3], {"duplicate": 1}, False, False, {}),
        # Redis lost the session's state: rebuilt from the topic.
        ([GAP, -1], {"gap": 1}, False, False, {PARTITION: {SID}}),
        (
            redis.ResponseError("apply.lua: unknown op Q"),
            {"gap": 1},
            False,
            False,
            {PARTITION: {SID}},
        ),
        # Blocked by another process: known from now on.
        ([BLOCKED, 2], {"blocked": 1}, True, True, {}),
    ],
)
def test_redis_replies_are_settled(
    reply: Any, counts: dict[str, int], cached: bool, blocked: bool, rebuild: dict[int, set[str]]
) -> None:
    batches, stats = planner(2)
    plan = batches.plan([record(3)])
    stats.clear()
    batches.settle(plan.queued, [reply], plan.rebuild)
    assert stats == Counter(counts)
    assert (SID in batches.cache) is cached
    assert cached is False or batches.cache[SID].blocked is blocked
    assert plan.rebuild == rebuild


def test_replies_to_block_commands_are_not_counted() -> None:
    batches, stats = planner(2)
    plan = batches.plan([POISON, record(0, OTHER)])
    batches.settle(plan.queued, [1, 1, [APPLIED, 0]], plan.rebuild)
    assert stats == Counter({"applied": 1})


def test_a_settled_gap_joins_the_gaps_met_while_planning() -> None:
    batches, stats = planner(2)
    plan = batches.plan([record(9), record(0, OTHER)])
    batches.settle(plan.queued, [[GAP, -1]], plan.rebuild)
    assert plan.rebuild == {PARTITION: {SID, OTHER}}
    assert stats == Counter({"gap": 2})


def test_replies_must_match_the_commands() -> None:
    batches, _ = planner(2)
    plan = batches.plan([record(3), record(4)])
    with pytest.raises(ValueError):
        batches.settle(plan.queued, [[APPLIED, 3]], plan.rebuild)


def test_a_batch_moves_its_sessions_in_the_recent_index_and_trims_it() -> None:
    projection = TranscriptProjection(Keys())
    cache: OrderedDict[str, Entry[Any]] = OrderedDict(
        (sid, Entry(projection.fresh(), partition=PARTITION)) for sid in (SID, OTHER)
    )
    batches = Planner(projection, cache, Counter(), TOPIC)

    def at(seq: int, sid: str, time: int) -> Record:
        event = Event.from_json(
            {"type": "turn/start", "seq": seq, "time": time, "data": {"turn": 1}}
        )
        return Record(sid, event, PARTITION, seq)

    plan = batches.plan([at(0, SID, 5), at(0, OTHER, 7), at(1, SID, 9), at(5, OTHER, 11)])
    key = Keys().recent("transcript")
    # Each session once, at the time of its last event applied (OTHER's seq 5 is a gap).
    assert plan.commands[-2:] == [
        ("ZADD", key, "GT", 9, SID, 7, OTHER),
        ("ZREMRANGEBYRANK", key, 0, -projection.recent_sessions - 1),
    ]
    assert plan.queued[-2:] == [None, None] and len(plan.queued) == len(plan.commands)
    # Their replies settle nothing.
    applied: list[Any] = [[APPLIED]] * 3
    stats: Counter[str] = batches.stats
    batches.settle(plan.queued, [*applied, 2, 0], {})
    assert stats["applied"] == 3
    # A batch that applies nothing leaves the index alone.
    assert batches.plan([at(0, SID, 12)]).commands == []
