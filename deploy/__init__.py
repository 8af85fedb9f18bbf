"""Deployment: the local stack (real Kafka KRaft + Redis) and manifests for larger setups."""
