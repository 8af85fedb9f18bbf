"""One event's effect on a session's surface, computed with the core's own rules.

``dsh.Session`` folds the surface together with the turn invariants over the whole log; a
projector must resume from the small state it keeps in Redis instead (current nodes, each
node's type and current message, generations). So this module replays ``Session._plan`` /
``_commit`` for the surface layer only, calling the same pure helpers of the core: vocabulary
and provenance checks, ``Surface.plan_replace``, the node-0 and tool-result rewrite rules,
``run_interpreter``. Turn invariants are the writer's job and are not re-checked here.
``dsh verify`` compares the result with ``Session.derive_messages()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh.errors import SurfaceError, ValidationError
from dsh.event import Event, Replace
from dsh.node_zero import check_node_zero
from dsh.projections import Interpreter, run_interpreter
from dsh.provenance import check_replace_coverage, check_sources
from dsh.surface import Surface
from dsh.tool_rewrite import check_tool_result_rewrite
from dsh.vocabulary import (
    BUILTIN_PROJECTION_TYPES,
    CORE_TYPES,
    SURFACE_TYPES,
    check_data,
    message_of,
)
from projectors.errors import MissingInterpreterError, PoisonRecordError

# As in dsh.messages: these project to nothing while their message has no content.
DROP_WHEN_EMPTY = frozenset({"system/message", "assistant/message"})


@dataclass
class Node:
    type: str
    message: Any  # the current message: the event's own, or a projection's rewrite
    data: Any = None  # a tool/result's data, which a later rewrite is compared with


@dataclass
class SurfaceState:
    applied: int = -1
    surface: Surface = field(default_factory=Surface)
    nodes: dict[int, Node] = field(default_factory=dict)

    @classmethod
    def restore(
        cls, applied: int, nodes: list[int], info: dict[int, Node], rg: int, cg: int
    ) -> SurfaceState:
        surface = Surface()
        for seq in nodes:
            surface.commit_append(seq)
        surface.replace_generation, surface.content_generation = rg, cg
        return cls(applied, surface, info)

    def derive_messages(self) -> list[Any]:
        out = []
        for seq in self.surface.nodes:
            node = self.nodes[seq]
            if node.type in DROP_WHEN_EMPTY and not node.message["content"]:
                continue
            out.append(node.message)
        return out


@dataclass(frozen=True)
class SurfaceChange:
    """What one event did to the surface: the writes, and what the audit records."""

    added: int | None = None
    shadowed: tuple[int, ...] = ()
    rewritten: tuple[int, ...] = ()  # nodes whose message a projection changed


def is_projection(ev: Event, interpreters: Mapping[str, Interpreter]) -> bool:
    return ev.type not in CORE_TYPES and (
        ev.type in interpreters or ev.type in BUILTIN_PROJECTION_TYPES
    )


def step(
    state: SurfaceState,
    ev: Event,
    interpreters: Mapping[str, Interpreter],
    *,
    full_checks: bool = True,
) -> SurfaceChange:
    """Apply one event to ``state``, or raise without touching it if the core would refuse it.

    ``full_checks=False`` skips the two rules that need node types and data (node 0, tool-result
    rewrite) and runs no interpreter: for a projection that only tracks which nodes are current.
    """
    if ev.seq != state.applied + 1:
        raise PoisonRecordError(f"event {ev.seq}: the session's next seq is {state.applied + 1}")
    change = _plan(state, ev, interpreters, full_checks)
    state.applied = ev.seq
    return change


def _plan(
    state: SurfaceState, ev: Event, interpreters: Mapping[str, Interpreter], full_checks: bool
) -> SurfaceChange:
    t, op, seq = ev.type, ev.surface_op, ev.seq
    if t in CORE_TYPES:
        if not ev.vetted:  # as dsh.Session does: context-free, so once per Event object
            check_data(t, ev.data, seq)  # (a replay of several projections plans each once)
            object.__setattr__(ev, "vetted", True)
        sources = ev.source_event_seqs
        if sources is not None:
            sources = check_sources(t, seq, sources)
        if t not in SURFACE_TYPES:
            if op is not None:
                raise SurfaceError(
                    f'event {seq}: "{t}" is not a surface type; surfaceOp is forbidden',
                    code="SURFACE_OP_FORBIDDEN",
                )
            return SurfaceChange()
        if op == "append":
            state.surface.commit_append(seq)
            state.nodes[seq] = _node(ev)
            return SurfaceChange(added=seq)
        if type(op) is not Replace:
            raise SurfaceError(
                f'event {seq}: surface event "{t}" requires a valid surfaceOp, got {op!r}',
                code="SURFACE_OP_REQUIRED" if op is None else "INVALID_SURFACE_OP",
            )
        plan = state.surface.plan_replace(op, seq)
        check_replace_coverage(seq, sources, plan.shadowed)
        if full_checks:
            node0 = state.surface.node_at(0)
            check_node_zero(t, seq, plan, None if node0 is None else state.nodes[node0].type)
            if t == "tool/result":
                target = state.nodes[plan.shadowed[0]]
                check_tool_result_rewrite(seq, ev.data, plan, target.type, target.data)
        state.surface.commit_replace(plan, seq)
        for old in plan.shadowed:
            del state.nodes[old]
        state.nodes[seq] = _node(ev)
        return SurfaceChange(added=seq, shadowed=plan.shadowed)
    if is_projection(ev, interpreters) or (not full_checks and t in BUILTIN_PROJECTION_TYPES):
        return _projection(state, ev, interpreters, full_checks)
    if ev.ignorable:
        return SurfaceChange()  # kept, never applied: its surfaceOp is opaque data
    raise ValidationError(
        f'event {seq}: unknown event type "{t}" must be marked ignorable: true',
        code="UNKNOWN_TYPE",
    )


def _projection(
    state: SurfaceState, ev: Event, interpreters: Mapping[str, Interpreter], full_checks: bool
) -> SurfaceChange:
    interpreter = interpreters.get(ev.type)
    if interpreter is None and full_checks:
        raise MissingInterpreterError(
            f'event {ev.seq}: no interpreter is registered for message projection "{ev.type}"',
        )
    if ev.surface_op is not None or ev.source_event_seqs is not None:
        raise PoisonRecordError(
            f'event {ev.seq} ("{ev.type}"): a message projection carries neither surfaceOp '
            "nor sourceEventSeqs",
        )
    decision: dict[int, Any] = {}
    if interpreter is not None and full_checks:
        nodes = state.surface.nodes
        positions = {seq: i for i, seq in enumerate(nodes)}
        decision = run_interpreter(
            interpreter, ev, nodes, positions, lambda seq: state.nodes[seq].message
        )
    for seq, message in decision.items():
        state.nodes[seq].message = message
    state.surface.content_generation += 1
    return SurfaceChange(rewritten=tuple(decision))


def _node(ev: Event) -> Node:
    return Node(
        ev.type, message_of(ev.type, ev.data), ev.data if ev.type == "tool/result" else None
    )
