"""The workers' Celery app is built from Settings by make_app, and from nothing else
(no worker is started: the app's configuration is read as the worker would read it)."""

from __future__ import annotations

import ssl
from pathlib import Path

from parley.shared.protocol import DEFAULT_QUEUE
from parley.shared.settings import Settings
from parley.workers.app import BrokerConnection, make_app
from parley.workers.app import app as worker_app

BROKER = "redis://10.0.0.7:6390/3"


def settings_for(broker_url: str = BROKER, **fields) -> Settings:
    """Settings on ``broker_url``, whatever the environment says."""
    return Settings(redis_url="redis://10.0.0.7:6390/0", broker_url=broker_url, **fields)


def test_the_app_uses_the_settings_broker_through_the_bounded_reconnect_transport():
    app = make_app(settings_for())

    assert app.conf.broker_url == BROKER
    assert app.conf.broker_transport == "parley.workers.app:RedisTransport"
    assert app.conf.broker_use_ssl is None
    assert isinstance(app.connection_for_read(), BrokerConnection)


def test_the_visibility_timeout_and_reconnect_bound_come_from_the_settings():
    app = make_app(settings_for(task_visibility_timeout_s=42, worker_reconnect_max_s=2.5))

    assert app.conf.broker_transport_options == {
        "visibility_timeout": 42, "interval_start": 0.0, "interval_step": 0.5,
        "interval_max": 2.5}
    assert app.conf.broker_connection_max_retries is None


def test_tasks_are_acked_late_and_never_requeued_when_a_pool_process_dies():
    conf = make_app(settings_for()).conf

    assert (conf.task_acks_late, conf.task_reject_on_worker_lost) == (True, False)
    assert conf.worker_cancel_long_running_tasks_on_connection_loss is False
    assert (conf.task_default_queue, conf.worker_prefetch_multiplier) == (DEFAULT_QUEUE, 1)
    assert (conf.task_ignore_result, conf.result_backend) == (True, None)


def test_a_tls_broker_verifies_the_server_against_the_settings_ca(tmp_path: Path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")

    app = make_app(settings_for("rediss://redis.internal:6380/1", redis_tls_ca_file=str(ca)))

    assert app.conf.broker_use_ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED,
                                       "ssl_check_hostname": True, "ssl_ca_certs": str(ca)}
    # kombu chooses the transport for rediss://: it turns TLS on from the scheme.
    assert app.conf.broker_transport is None


def test_making_an_app_leaves_the_workers_app_as_it_was():
    before = dict(worker_app.conf.broker_transport_options)

    other = make_app(settings_for(task_visibility_timeout_s=before["visibility_timeout"] + 7))

    assert other.conf.broker_transport_options["visibility_timeout"] != before["visibility_timeout"]
    assert worker_app.conf.broker_transport_options == before
