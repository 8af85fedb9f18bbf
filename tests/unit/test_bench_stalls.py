"""The benchmarks' stall report (bench/stalls.py): which second was slowest and what the
machine was waiting on in it, from samples made up here."""

from __future__ import annotations

from bench.stalls import PressureSampler, Sample, describe, read_sample, slowest_second


def sampler_with(samples: list[Sample]) -> PressureSampler:
    sampler = PressureSampler()
    sampler.samples = samples
    return sampler


def sample(at: float, io_us: int, cpu_us: int = 0, writeback_kb: int = 0) -> Sample:
    return Sample(at, {"cpu some": cpu_us, "io some": io_us}, 2048, writeback_kb)


def test_the_slowest_second_is_set_beside_the_stalls_of_that_second() -> None:
    # io stalls 5 ms per second, except 400 ms between t=12 and t=13; writeback then only
    samples = []
    io = 0
    for tenth in range(0, 160):
        at = tenth / 10
        samples.append(sample(at, io, writeback_kb=4096 if 12 <= at <= 13 else 0))
        io += 40_000 if 12 <= at < 13 else 500
    timed = [(10 + k / 100, 5.0) for k in range(500)]  # 100/s from t=10 for 5 s
    timed[250] = (12.5, 180.0)
    timed[260] = (12.6, 90.0)

    worst = slowest_second(timed, sampler_with(samples), slow_ms=50)

    assert worst["at_s"] == 2 and worst["max_ms"] == 180.0
    assert (worst["slow"], worst["operations"], worst["slow_in_run"]) == (2, 100, 2)
    # from 12.0 to 13.18 (the slowest one's return): 400 ms of io stall over ~1.2 s
    assert 300 < worst["stalls"]["io some ms/s"] < 400
    assert round(worst["typical_stalls"]["io some ms/s"], 6) == 5.0
    assert worst["stalls"]["writeback MB max"] == 4.0
    line = describe(worst, 50)
    assert "slowest second at +2 s: max 180.0 ms, 2 of 100 over 50 ms" in line
    assert "io some 3" in line and "(median second 5)" in line


def test_no_samples_no_operations() -> None:
    assert slowest_second([], sampler_with([]), 50) == {}
    assert describe({}, 50) == "no operations timed"
    worst = slowest_second([(1.0, 3.0)], sampler_with([]), 50)
    assert worst["stalls"] == {} and "no PSI" in describe(worst, 50)


def test_a_sample_of_this_machine_reads_whatever_pressure_lines_it_has() -> None:
    first = read_sample()
    assert first.dirty_kb >= 0 and first.writeback_kb >= 0
    assert set(first.stalled_us) <= {"cpu some", "cpu full", "io some", "io full",
                                     "memory some", "memory full"}  # fmt: skip
