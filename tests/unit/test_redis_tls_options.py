"""TLS options for every Redis connection, built from Settings in shared/connections.py."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import redis
from redis.asyncio.connection import SSLConnection

from parley.client import Client
from parley.coordinator.connections import connect
from parley.coordinator.transport import CeleryTransport
from parley.shared.connections import RedisTlsError, broker_use_ssl, redis_kwargs
from parley.shared.settings import Settings

TLS_URL = "rediss://redis.internal:6380/0"


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, str]:
    """Three readable files standing in for the CA bundle, certificate and key."""
    files = {}
    for name in ("ca", "cert", "key"):
        path = tmp_path / f"{name}.pem"
        path.write_text("-----BEGIN CERTIFICATE-----\n")
        files[name] = str(path)
    return files


def tls_settings(url: str = TLS_URL, **fields) -> Settings:
    """Settings on ``url`` for Redis and the broker, whatever the environment says."""
    return Settings(redis_url=url, broker_url="", **fields)


def test_a_plain_url_gets_no_tls_options():
    settings = tls_settings("redis://127.0.0.1:6379/0")
    assert redis_kwargs(settings) == {}
    assert broker_use_ssl(settings) is None


def test_a_rediss_url_always_verifies_the_certificate_and_host_name():
    expected = {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True}
    assert redis_kwargs(tls_settings()) == expected
    assert broker_use_ssl(tls_settings()) == expected


def test_the_ca_certificate_and_key_files_are_passed_through(pem_files):
    settings = tls_settings(redis_tls_ca_file=pem_files["ca"],
                            redis_tls_cert_file=pem_files["cert"],
                            redis_tls_key_file=pem_files["key"])
    expected = {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True,
                "ssl_ca_certs": pem_files["ca"], "ssl_certfile": pem_files["cert"],
                "ssl_keyfile": pem_files["key"]}
    assert redis_kwargs(settings) == expected
    assert broker_use_ssl(settings) == expected


def test_a_separate_rediss_broker_gets_the_options_and_a_plain_redis_none(pem_files):
    settings = Settings(redis_url="redis://127.0.0.1:6379/0", broker_url=TLS_URL,
                        redis_tls_ca_file=pem_files["ca"])
    assert redis_kwargs(settings) == {}
    assert broker_use_ssl(settings) == {"ssl_cert_reqs": ssl.CERT_REQUIRED,
                                        "ssl_check_hostname": True,
                                        "ssl_ca_certs": pem_files["ca"]}


def test_a_non_redis_broker_is_left_to_celery():
    settings = Settings(broker_url="amqps://guest:guest@rabbit:5671//")
    assert broker_use_ssl(settings) is None


@pytest.mark.parametrize(("field", "setting"), [
    ("redis_tls_ca_file", "PARLEY_REDIS_TLS_CA_FILE"),
    ("redis_tls_cert_file", "PARLEY_REDIS_TLS_CERT_FILE"),
    ("redis_tls_key_file", "PARLEY_REDIS_TLS_KEY_FILE"),
])
def test_a_missing_file_is_one_line_naming_its_setting(tmp_path, field, setting):
    missing = str(tmp_path / "nowhere.pem")
    with pytest.raises(RedisTlsError) as raised:
        redis_kwargs(tls_settings(**{field: missing}))
    assert str(raised.value) == f"{setting}={missing}: no such file"


def test_a_key_without_its_certificate_is_refused(pem_files):
    with pytest.raises(RedisTlsError, match="^PARLEY_REDIS_TLS_KEY_FILE is set without "
                                            "PARLEY_REDIS_TLS_CERT_FILE"):
        broker_use_ssl(tls_settings(redis_tls_key_file=pem_files["key"]))


def test_tls_files_for_plain_urls_are_refused_rather_than_ignored(pem_files):
    settings = tls_settings("redis://127.0.0.1:6379/0", redis_tls_ca_file=pem_files["ca"])
    with pytest.raises(RedisTlsError, match="^PARLEY_REDIS_TLS_CA_FILE is set but neither "
                                            "PARLEY_REDIS_URL nor PARLEY_BROKER_URL uses TLS"):
        redis_kwargs(settings)


@pytest.mark.parametrize("query", ["ssl_cert_reqs=none", "ssl_cert_reqs=CERT_OPTIONAL",
                                   "ssl_check_hostname=false", "ssl_ca_certs=/tmp/ca.pem"])
def test_tls_options_in_the_url_are_refused_naming_the_setting(query):
    with pytest.raises(RedisTlsError) as raised:
        redis_kwargs(tls_settings(f"{TLS_URL}?{query}"))
    message = str(raised.value)
    assert message.startswith(f"PARLEY_REDIS_URL carries the TLS option {query}: ")
    assert "PARLEY_REDIS_TLS_CA_FILE" in message and "\n" not in message
    with pytest.raises(RedisTlsError, match="^PARLEY_BROKER_URL carries"):
        broker_use_ssl(Settings(broker_url=f"{TLS_URL}?{query}"))


def test_a_url_asking_for_verification_is_accepted():
    assert redis_kwargs(tls_settings(f"{TLS_URL}?ssl_cert_reqs=required"))["ssl_cert_reqs"] \
        == ssl.CERT_REQUIRED


def test_the_clients_redis_verifies_on_a_rediss_url(pem_files):
    client = Client(tls_settings(redis_tls_ca_file=pem_files["ca"]))
    pool = client.redis.connection_pool
    assert pool.connection_class is redis.SSLConnection
    assert pool.connection_kwargs["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert pool.connection_kwargs["ssl_ca_certs"] == pem_files["ca"]


def test_the_coordinators_redis_verifies_on_a_rediss_url(pem_files):
    pool = connect(tls_settings(redis_tls_ca_file=pem_files["ca"]), 4).connection_pool
    assert issubclass(pool.connection_class, SSLConnection)
    assert pool.connection_kwargs["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert pool.connection_kwargs["ssl_ca_certs"] == pem_files["ca"]


def test_the_coordinators_broker_connection_verifies_on_a_rediss_url(pem_files):
    settings = tls_settings(redis_tls_ca_file=pem_files["ca"])
    transport = CeleryTransport(settings.broker_url, settings=settings)
    with transport.app.connection_for_write() as connection:
        assert connection.ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_check_hostname": True,
                                  "ssl_ca_certs": pem_files["ca"]}
