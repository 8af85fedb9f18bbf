"""`dsh serve`: the pipeline over HTTP for services in any language.

``app`` wires the parts (``create_app``); ``appends``, ``reads``, ``stream`` and ``health`` are
the routes; ``problems`` turns every error into RFC 9457 problem details; ``auth`` maps bearer
tokens to tenants; ``limits`` refuses what is too large or malformed before anything is
appended; ``clients`` holds the Kafka and Redis clients the routes share; ``errors`` is what
starting it fails with.
"""
