"""Message-projection interpreters shipped with the pipeline (``CONTRACT.md`` §3).

The core knows ``image/offload`` as a projection type but ships no interpreter for it: a
deployment chooses one and names it in ``DSH_WRITER_PROJECTIONS`` and
``DSH_PROJECTOR_PROJECTIONS`` (writer and projectors must agree). :mod:`.image_offload` is the
reference one, which the local stack and ``dsh demo`` register.
"""

from interpreters.image_offload import OFFLOAD_SPEC, offload_images

__all__ = ["OFFLOAD_SPEC", "offload_images"]
