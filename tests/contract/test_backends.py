"""One contract, three backends (``tests/support/contract.py``): the DSH reference vectors, the
core's rule tables and the scripted session, run against the in-process ``dsh.Session``, the
file store and ``SessionClient`` over a real writer. Each backend must answer every operation
as the in-process core does (accepted with the same seqs, or refused with the same error class
and code) and end with the same logs, surfaces and model messages.

Each session has the invariants mode the scenario gives it (the DSH vectors' sessions are bare
unless named ``inv-``); the pipeline's first append creates the session in that mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from producers import SessionClient
from schemas import draft
from servicekit.settings import KafkaSettings
from tests.integration.writer_support import multi_turn_script, running_writer, writer_settings
from tests.support import dsh_vectors, tables
from tests.support.contract import (
    Backend,
    Driver,
    Files,
    InProcess,
    Modes,
    Pipeline,
    Scenario,
    assert_same,
    run,
)
from tests.support.topics import fresh_topics


def _steps(session: str, steps: list[tables.Step]) -> Scenario:
    def drive(driver: Driver) -> None:
        for step in steps:
            driver.append(session, *step)

    return drive


def _scripted(driver: Driver) -> None:
    def append(type_: str, data: Any, op: Any, sources: Any) -> Any:
        return driver.append("scripted", type_, data, op, sources)

    def append_many(drafts: list[dict[str, Any]]) -> list[Any]:
        driver.append_many("scripted", drafts)
        return []

    multi_turn_script(append, append_many)


def _scenarios() -> Iterator[tuple[str, Scenario, Modes]]:
    """(name, scenario, each session's invariants mode)."""
    for vector in dsh_vectors.SCENARIOS:
        yield (
            f"dsh-vector:{vector['scenario']}",
            dsh_vectors.scenario_of(vector),
            dsh_vectors.invariants_of,
        )
    for name, prefix, last, _ in tables.CASES:
        yield f"invariants:{name}", _steps("s", [*prefix, last]), lambda _: True
    for name, type_, data, _ in tables.BAD:
        op = "append" if type_.endswith("message") or type_ == "tool/result" else None
        steps = [*tables.VOCABULARY_BASE, (type_, data, op, None)]
        yield f"vocabulary:{name}", _steps("s", steps), lambda _: True
    rows: list[tuple[Any, ...]] = [*tables.ACCEPTED, *tables.REJECTED]
    for row in rows:
        name, type_, data, op, sources = row[:5]
        steps = [*tables.BASE, (type_, data, op, sources)]
        yield f"surface:{name}", _steps("s", steps), lambda _: False  # the bare layer
    yield "scripted session", _scripted, lambda _: True


SCENARIOS = list(_scenarios())
IDS = [s[0] for s in SCENARIOS]


@pytest.fixture(scope="module")
def pipeline(topics_module: KafkaSettings) -> Iterator[Pipeline]:
    with (
        running_writer(topics_module, writer_settings()),
        SessionClient(settings=topics_module, timeout=30) as client,
    ):
        yield Pipeline(client)


@pytest.fixture(scope="module")
def topics_module(servers: Any) -> KafkaSettings:
    """The contract's topics, made once for the whole module (the pipeline serves them all)."""
    from tests.conftest import TEST_PARTITIONS

    return fresh_topics(servers.bootstrap_servers, TEST_PARTITIONS, "contract")


def _check(backend: Backend, scenario: Scenario, modes: Modes) -> None:
    expected = run(InProcess(), scenario, modes)
    assert_same(run(backend, scenario, modes), expected, backend.name)


@pytest.mark.parametrize(("name", "scenario", "modes"), SCENARIOS, ids=IDS)
def test_the_file_store_answers_as_the_core(
    name: str, scenario: Scenario, modes: Modes, tmp_path: Path
) -> None:
    _check(Files(tmp_path), scenario, modes)


@pytest.mark.parametrize(("name", "scenario", "modes"), SCENARIOS, ids=IDS)
def test_the_pipeline_answers_as_the_core(
    name: str, scenario: Scenario, modes: Modes, pipeline: Pipeline
) -> None:
    _check(pipeline.fresh(), scenario, modes)


def test_the_in_process_core_is_its_own_reference() -> None:
    """The reference is deterministic: two runs of the scripted session agree."""
    assert_same(run(InProcess(), _scripted), run(InProcess(), _scripted), "session")


def test_a_batch_is_all_or_nothing_on_every_backend(tmp_path: Path, pipeline: Pipeline) -> None:
    def batch(driver: Driver) -> None:
        driver.append("s", "turn/start", {"turn": 1})
        driver.append_many(
            "s",
            [
                draft("step/start", {"turn": 1, "step": 1}),
                draft("step/start", {"turn": 1, "step": 2}),  # refused: a step is open
            ],
        )
        driver.append("s", "step/start", {"turn": 1, "step": 1})  # seq 1: nothing was kept

    expected = run(InProcess(), batch)
    assert expected.outcomes == [
        ("ok", 0),
        ("rejected", "InvariantError", "STEP_ALREADY_OPEN"),
        ("ok", 1),
    ]
    for backend in (Files(tmp_path), pipeline.fresh()):
        assert_same(run(backend, batch), expected, backend.name)
