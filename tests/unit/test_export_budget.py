"""The export's memory budget across partitions (projectors/export/budget.py), with each
format's real sink and files: past the budget the file holding the most writes it out, a file
closed holds nothing, and every row reaches its file once; the setting shared between the rows
and the consumer, by the brokers leading the topic, in sizes librdkafka takes. The same against
Kafka: tests/integration/test_analytics_export.py (one broker) and test_three_node_cluster.py
(three leaders)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dsh
from projectors.export import FORMATS, ExportSettings
from projectors.export.budget import MIB, Budget, split
from projectors.export.files import Exported, PartFile
from schemas import decode_event, encode_event
from servicekit.settings import ConfigError
from tests.support.builders import user

DATA = 64 * 1024


def _item(partition: int, offset: int) -> Exported:
    event = dsh.Event.from_json(
        {"type": "user/message", "seq": offset, "time": 1, "data": user("x" * DATA)}
    )
    value = encode_event(event, f"s-{partition}")
    return Exported(partition, offset, value, decode_event(value), False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_past_the_budget_the_largest_buffer_is_written_out(fmt: str, tmp_path: Path) -> None:
    form = FORMATS[fmt]
    files = {
        p: PartFile(tmp_path, "2026-01-01", p, 0, form.ext, form.sink, form.codecs[0])
        for p in range(3)
    }
    budget = Budget(256 * 1024)
    # Partition 0 gets two records, then 1 and 2 one each: the fourth goes over 256 KiB.
    for p, offset in ((0, 0), (0, 1), (1, 0), (2, 0)):
        files[p].add(_item(p, offset))
        budget.added(p, files)
    assert budget.peak > budget.limit >= budget.total
    assert files[0].sink.buffered() == 0  # the largest, written out
    assert files[1].sink.buffered() > 0 and files[2].sink.buffered() > 0
    assert budget.total == sum(f.sink.buffered() for f in files.values())

    files[1].close()
    budget.closed(1)
    assert budget.total == files[2].sink.buffered()
    for p in (0, 2):
        files[p].close()
        budget.closed(p)
    assert budget.total == 0 and not budget.held


def test_the_budget_is_a_setting_of_at_least_one_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ExportSettings().buffer_bytes == 128 * MIB
    monkeypatch.setenv("DSH_EXPORT_BUFFER_BYTES", str(MIB - 1))
    with pytest.raises(ValueError, match="buffer_bytes"):
        ExportSettings()
    monkeypatch.setenv("DSH_EXPORT_BUFFER_BYTE", str(MIB))
    with pytest.raises(ConfigError, match="DSH_EXPORT_BUFFER_BYTE"):
        ExportSettings()


TIB = 1 << 40
LIBRDKAFKA_QUEUE_MAX = 2_097_151 * 1024  # its ranges: past them it makes no consumer
LIBRDKAFKA_FETCH_MAX = 2_147_483_135


@pytest.mark.parametrize(
    ("setting", "leaders", "rows", "prefetch"),
    [
        (MIB, 1, MIB // 2, (MIB, MIB)),  # under 8 MiB: the consumer's floors, the rows half
        (6 * MIB, 1, 3 * MIB, (MIB, MIB)),
        (8 * MIB, 1, 4 * MIB, (MIB, MIB)),
        (32 * MIB, 1, 28 * MIB, (MIB, MIB)),
        (128 * MIB, 1, 112 * MIB, (4 * MIB, 4 * MIB)),  # the default: 1/8 to the consumer
        (TIB, 1, TIB - 2 * (LIBRDKAFKA_QUEUE_MAX + LIBRDKAFKA_FETCH_MAX), None),
        (128 * MIB, 0, 112 * MIB, (4 * MIB, 4 * MIB)),  # none led at the start: sized as one
        # Three leaders: a fetch each, together what one had; the queue keeps its 1/32.
        (128 * MIB, 3, 128 * MIB - 2 * (4 * MIB + 3 * (4 * MIB // 3)), (4 * MIB, 4 * MIB // 3)),
        (96 * MIB, 3, 84 * MIB, (3 * MIB, MIB)),
        # Seven: the fetches' floors take the queue's part of the 1/8 down to its own floor;
        # twelve: 2 MiB more per leader, out of the rows.
        (128 * MIB, 7, 112 * MIB, (MIB, MIB)),
        (128 * MIB, 12, 102 * MIB, (MIB, MIB)),
        (16 * MIB, 3, 8 * MIB, (MIB, MIB)),  # 4 MiB per leader plus 4: both just fit
        (8 * MIB, 3, 4 * MIB, (MIB, MIB)),  # under it: the consumer's floors, the rows half
        (TIB, 3, TIB - 2 * (LIBRDKAFKA_QUEUE_MAX + 3 * LIBRDKAFKA_FETCH_MAX), None),
    ],
)
def test_the_setting_is_shared_between_the_rows_and_the_consumer(
    setting: int, leaders: int, rows: int, prefetch: tuple[int, int] | None
) -> None:
    from confluent_kafka import Consumer

    shares = split(setting, leaders)
    assert shares.rows == rows
    assert (shares.queue, shares.fetch) == (
        prefetch or (LIBRDKAFKA_QUEUE_MAX, LIBRDKAFKA_FETCH_MAX)
    )
    # The consumer holds its queue, a fetch from each leader over it, and the batch taken out
    # of the queue.
    assert shares.consumer == 2 * (shares.queue + max(leaders, 1) * shares.fetch)
    if setting >= 4 * (max(leaders, 1) + 1) * MIB:
        assert shares.rows + shares.consumer <= setting
    # librdkafka takes the sizes: it refuses a fetch under its message.max.bytes.
    Consumer({"group.id": "unused", **shares.consumer_config()}).close()


@settings(max_examples=500, deadline=None)
@given(st.integers(MIB, TIB), st.integers(1, 64))
def test_whatever_the_leaders_the_consumer_takes_its_share_or_its_floors(
    setting: int, leaders: int
) -> None:
    """1/8 of the setting, or 2 MiB per leader plus 2 MiB where the fetches' and the queue's
    floors (1 MiB each) make more; the rows the rest, never under half. So the two fit in the
    setting from 4 MiB per leader plus 4 MiB up; under it, half the setting and the floors."""
    shares = split(setting, leaders)
    floors = 2 * (leaders + 1) * MIB
    assert shares.fetch >= MIB and shares.queue >= MIB and shares.rows >= setting // 2
    assert shares.consumer <= max(setting // 8, floors)
    assert shares.rows + shares.consumer <= max(setting, setting // 2 + floors)
    if setting >= 2 * floors:
        assert shares.rows + shares.consumer <= setting
