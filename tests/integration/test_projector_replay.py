"""`dsh replay` rebuilds read models from the topic alone: every session, or the named ones."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

from deploy.config import KafkaSettings
from deploy.interpreters import offload_images
from projectors.keys import Keys
from projectors.read_api import Reader
from projectors.topic_reader import read_session
from projectors.verify import verify
from tests.integration.projector_support import (
    applied,
    forked,
    interleave,
    projector_env,
    publish,
    scripted_session,
    simple_session,
)

INTERPRETERS = {"image/offload": offload_images}


def _dsh(
    topics: KafkaSettings, redis_url: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh.cli", *args],
        env=projector_env(topics, redis_url, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


# In the calling process, and in forked workers that share the partitions unevenly.
@pytest.mark.parametrize("workers", ["1", "3"])
def test_replay_all_then_one_session(
    topics: KafkaSettings, redis_client: redis.Redis, servers, workers: str
) -> None:
    parent = scripted_session("replay-main").session
    sessions = [parent, forked(parent, "replay-fork")]
    sessions += [simple_session(f"replay-{i}", turns=4) for i in range(10)]
    records = publish(topics, interleave(*sessions))

    done = _dsh(topics, servers.redis_url, "replay", "--json", DSH_PROJECTOR_REPLAY_WORKERS=workers)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["sessions"] == len(sessions)
    assert result["records"] == records
    assert result["applied"] == 3 * records

    reader = Reader(redis_client, Keys())
    for session in sessions:
        report = verify(session.id, read_session(topics, session.id), reader, INTERPRETERS)
        assert report.ok, "\n".join(report.differences)

    # Lose one session's surface; replaying just that session and projection restores it.
    redis_client.delete(f"dsh:{{{parent.id}}}:surface:meta")
    assert applied(redis_client, "surface", parent.id) == -1
    done = _dsh(topics, servers.redis_url, "replay", parent.id, "--projection", "surface")
    assert done.returncode == 0, done.stderr
    assert "replayed" in done.stdout
    report = verify(parent.id, read_session(topics, parent.id), reader, INTERPRETERS)
    assert report.ok, "\n".join(report.differences)
    assert int(redis_client.hget(f"dsh:{{{parent.id}}}:surface:meta", "applies") or 0) == len(
        parent
    )
