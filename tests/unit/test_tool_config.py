"""`dsh kafka TOOL`'s client properties: the pipeline's SASL and TLS settings as Kafka's Java
client reads them (java.util.Properties escapes, a JAAS login line)."""

from __future__ import annotations

import stat

from pydantic import SecretStr

from deploy.local.tool_config import client_properties_file, java_client_properties
from servicekit.settings import KafkaSettings


def test_a_scram_login_quotes_what_would_end_the_jaas_string() -> None:
    settings = KafkaSettings(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username='ops"1',
        sasl_password=SecretStr('p\\w"\nx'),
        ssl_ca_location="/etc/ca é.pem",
    )
    props = java_client_properties(settings)
    assert props["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="ops\\"1" password="p\\\\w\\"\\nx";'
    )
    assert props["ssl.truststore.type"] == "PEM"
    with client_properties_file(props) as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        lines = path.read_text(encoding="ascii").splitlines()
    assert not path.exists()
    assert "ssl.truststore.location=/etc/ca \\u00e9.pem" in lines
    assert "security.protocol=SASL_SSL" in lines
    # Properties' own escapes on top: each backslash doubled, ``=`` and ``"`` kept apart.
    jaas = next(line for line in lines if line.startswith("sasl.jaas.config="))
    assert 'password\\="p\\\\\\\\w\\\\"\\\\nx";' in jaas
