"""The consumer runtime every projector shares.

One consumer group per projection, read_committed, offsets committed by hand only after Redis
acknowledged the batch (at-least-once delivery; the apply script makes it effectively once).
A batch spans many sessions: events are planned in Python against a per-session state cache
and sent as one pipeline of script calls. Whatever the cache believes, Redis decides: a
duplicate is skipped, a gap (Redis lost state) rebuilds that session from the topic.

Its parts, each a module:

- :mod:`.service`: the :class:`Runtime` that builds the parts and wires them;
- :mod:`.loop`: poll, two batches in hand, commit, retry;
- :mod:`.batches`: records in, Redis commands out, replies settled (no Kafka client);
- :mod:`.sessions`: the cached per-session states, what a failed batch leaves to check in
  Redis, and the link to Redis;
- :mod:`.rebuilds`: sessions rebuilt from the topic (gaps, failovers, ``dsh replay``);
- :mod:`.handover`: a failover's mend handed on, through Redis, to a partition's next owner;
- :mod:`.poison`: dead letters and the commands that block their session;
- :mod:`.ownership`: partitions assigned and revoked;
- :mod:`.watch`: the sentinel (Redis lost its data) and the gauges.
"""

from projectors.runtime.service import Runtime

__all__ = ["Runtime"]
