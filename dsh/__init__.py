"""dsh — the pure core of dsh-pipeline (being built)."""
