"""The single-writer service: validates append commands against the in-memory sessions of the
partitions it owns and publishes what they commit, exactly once.

Its parts, each a module:

- :mod:`.service`: the :class:`Writer` that wires them and runs the loop;
- :mod:`.commands`: one command in, its outcome and records out (no Kafka client);
- :mod:`.state`, :mod:`.rejections`: what a writer holds per partition and session;
- :mod:`.pipeline`: the transactions, with the commit of one overlapping the next;
- :mod:`.recovery`: what a failed transaction leads to (decisions on error codes only);
- :mod:`.ownership`, :mod:`.restore`, :mod:`.takeover`: partitions taken on and restored;
- :mod:`.snapshots`: snapshots and checkpoints, which make restores short;
- :mod:`.journal`, :mod:`.wire`: how records are kept and assembled;
- :mod:`.failpoints`: faults the crash tests build a writer with.
"""

from producers.writer.service import Writer

__all__ = ["Writer"]
