"""Three minutes of the nemesis soak (``python -m tests.reliability.soak`` runs thirty): a
churning load of sessions while faults of every class come one at a time; nothing lost or
doubled, and every session verified against its projections."""

from __future__ import annotations

import pytest

from deploy.local.stack import LocalStack
from tests.reliability.harness import Namespace
from tests.reliability.soak import SoakConfig, assert_clean, soak, summary


# Minutes of load by design, then the whole history read back and verified. Its load would slow
# every unit of the parallel run beside it, so `make test` runs it on its own once the rest is
# done (`-m "not soak"`, then `-m soak`), with the machine to itself.
@pytest.mark.soak
@pytest.mark.timeout(600)
def test_three_minutes_of_faults_at_random_lose_and_double_nothing(
    ns: Namespace, cluster: LocalStack
) -> None:
    config = SoakConfig(
        minutes=3.0, slots=24, window=4, session_events=120, warmup_s=20.0, gap_s=(3.0, 8.0)
    )
    result = soak(ns, cluster, config)
    figures = summary(result)
    print("SOAK", figures, result.verdict, result.counts)
    assert_clean(result)
    assert len(result.faults) >= 2, result.faults
    assert result.verdict["verified_sessions"] >= config.slots
