"""Avro wire format of dsh-pipeline: the ``.avsc`` schemas and the single-object codec."""
