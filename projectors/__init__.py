"""Consumer services that build the surface, transcript and audit read models in Redis."""
