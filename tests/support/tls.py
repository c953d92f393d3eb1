"""A throwaway certificate authority and a private redis-server speaking TLS, for tests.

    certs = make_certificates(tmp_path)          # skips the test without the openssl CLI
    with TlsRedis(tmp_path, certs) as server:    # skips it when redis-server has no TLS
        Settings(redis_url=server.url, redis_tls_ca_file=str(certs.ca), ...)

The server's certificate names only ``localhost``: a client that connects to 127.0.0.1
must fail the host name check.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from parley import processes


@dataclass(frozen=True)
class Certificates:
    """PEM files: the CA, the server's certificate and key, a client's certificate and key."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(directory: Path) -> Certificates:
    """A fresh CA and two certificates it signed, valid for one day."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed: cannot make test certificates")
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    _openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=parley test CA", "-keyout", ca_key, "-out", ca)
    server = _signed(directory, "server", ca, ca_key, "subjectAltName=DNS:localhost")
    client = _signed(directory, "client", ca, ca_key, "extendedKeyUsage=clientAuth")
    return Certificates(ca, *server, *client)


def _signed(directory: Path, name: str, ca: Path, ca_key: Path, extension: str
            ) -> tuple[Path, Path]:
    cert, key, request = (directory / f"{name}.{suffix}" for suffix in ("crt", "key", "csr"))
    extensions = directory / f"{name}.ext"
    extensions.write_text(extension + "\n")
    _openssl(directory, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
             "-keyout", key, "-out", request)
    _openssl(directory, "x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key,
             "-CAcreateserial", "-days", "1", "-extfile", extensions, "-out", cert)
    return cert, key


def _openssl(directory: Path, *args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=directory, check=True,
                   capture_output=True, timeout=60)


class TlsRedis:
    """A redis-server on free ports: plain TCP (for the readiness check) and TLS; stopped by
    its PID. ``auth_clients`` is redis' tls-auth-clients: ``no`` or ``yes``."""

    def __init__(self, directory: Path, certs: Certificates, auth_clients: str = "no") -> None:
        self.directory = directory / f"redis-tls-{auth_clients}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.certs = certs
        self.auth_clients = auth_clients
        self.port = processes.free_port()
        self.tls_port = processes.free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, host: str = "localhost") -> str:
        """The rediss:// URL of the TLS port."""
        return f"rediss://{host}:{self.tls_port}/0"

    def __enter__(self) -> TlsRedis:
        try:
            self.process = processes.start_redis(
                self.port, self.directory, "--tls-port", str(self.tls_port),
                "--tls-cert-file", str(self.certs.server_cert),
                "--tls-key-file", str(self.certs.server_key),
                "--tls-ca-cert-file", str(self.certs.ca),
                "--tls-auth-clients", self.auth_clients)
        except FileNotFoundError:
            pytest.skip("redis-server is not installed")
        except RuntimeError:
            log = (self.directory / "redis.log").read_text(errors="replace").strip()
            if "tls" not in log.lower():
                raise
            pytest.skip(f"redis-server was built without TLS: {log[-200:]}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None:
            processes.stop(self.process)
