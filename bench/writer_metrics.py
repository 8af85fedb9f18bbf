"""What the writer benchmark reads of the writer it started: its /metrics samples, and the
figures two scrapes of them give for what happened in between."""

from __future__ import annotations

import urllib.request

PHASES = ("validate", "offsets", "flush", "previous", "commit")


def scrape(port: int) -> dict[str, float]:
    """The writer's samples from its /metrics endpoint, keyed by name{labels} as printed."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def gc_pauses(before: dict[str, float], after: dict[str, float]) -> dict[str, list[float]]:
    """Per generation: collections and their total ms between two scrapes."""
    out = {}
    for g in range(3):
        key = f'dsh_writer_gc_pause_seconds_{{}}{{{{generation="{g}"}}}}'
        n = after.get(key.format("count"), 0) - before.get(key.format("count"), 0)
        total = after.get(key.format("sum"), 0) - before.get(key.format("sum"), 0)
        out[str(g)] = [n, total * 1000]
    return out


def phase_means_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean time per transaction in each phase between two scrapes."""
    out = {}
    for phase in PHASES:
        key = f'dsh_writer_transaction_phase_seconds_{{}}{{{{phase="{phase}"}}}}'
        n = after[key.format("count")] - before.get(key.format("count"), 0)
        total = after[key.format("sum")] - before.get(key.format("sum"), 0)
        out[phase] = total / n * 1000 if n else 0.0
    return out


def p99_bound_ms(
    before: dict[str, float], after: dict[str, float], histogram: str, labels: str = ""
) -> float:
    """The bucket bound under which 99 % of a histogram's observations between two scrapes
    fell (an upper bound of their p99); ``labels``: the sample's other labels, as printed."""
    prefix = f'{histogram}_bucket{{le="'
    suffix = f'"{"," if labels else ""}{labels}}}'
    bounds = sorted(
        (float(k[len(prefix) : -len(suffix)]), after[k] - before.get(k, 0))
        for k in after
        if k.startswith(prefix) and k.endswith(suffix)
    )
    total = bounds[-1][1] if bounds else 0
    return next((b * 1000 for b, n in bounds if n >= 0.99 * total), 0.0) if total else 0.0


def phase_p99_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per phase, :func:`p99_bound_ms` of the transactions between two scrapes."""
    return {
        phase: p99_bound_ms(
            before, after, "dsh_writer_transaction_phase_seconds", f'phase="{phase}"'
        )
        for phase in PHASES
    }


def transactions(before: dict[str, float], after: dict[str, float]) -> dict[str, object]:
    """What the writer's transactions were like between two scrapes: mean commit and batch,
    each phase's mean and p99 bound, a command's latency and wait, the writer's GC."""
    commits = (
        after["dsh_writer_transaction_commit_seconds_count"]
        - before["dsh_writer_transaction_commit_seconds_count"]
    )
    commit_s = (
        after["dsh_writer_transaction_commit_seconds_sum"]
        - before["dsh_writer_transaction_commit_seconds_sum"]
    )
    batch = after["dsh_writer_batch_commands_sum"] - before["dsh_writer_batch_commands_sum"]
    return {
        "mean_commit_ms": commit_s / commits * 1000,
        "mean_batch": batch / commits,
        "phase_mean_ms": phase_means_ms(before, after),
        "phase_p99_bound_ms": phase_p99_ms(before, after),
        "writer_latency_p99_bound_ms": p99_bound_ms(
            before, after, "dsh_writer_append_latency_seconds"
        ),
        "command_wait_p99_bound_ms": p99_bound_ms(before, after, "dsh_writer_command_wait_seconds"),
        "gc": gc_pauses(before, after),
    }
