"""Certificates for the TLS tests, made by openssl at test time (no key is kept in the repository): a CA,
a server certificate for 127.0.0.1 signed by it, a client certificate signed by it, and a second CA that
signed neither."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocksidecar.devbroker.listener import server_context


@dataclass(frozen=True)
class Certs:
    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def server_context(self, *, client_auth: bool = False) -> ssl.SSLContext:
        """devbroker's TLS-only context (``client_auth``: tls.server.need.client.auth=require)."""
        return server_context(self.server_cert, self.server_key, self.ca if client_auth else None)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", str(key), "-out", str(cert))  # fmt: skip
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], ext: str) -> tuple[Path, Path]:
    cert, key, csr = directory / f"{name}.pem", directory / f"{name}.key", directory / f"{name}.csr"
    extfile = directory / f"{name}.ext"
    extfile.write_text(ext)
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(csr)
    )
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-days", "2", "-extfile", str(extfile), "-out", str(cert))  # fmt: skip
    return cert, key


def make_certs(directory: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("the TLS tests make their certificates with the openssl command, which is not installed")
    ca = _ca(directory, "ca")
    other = _ca(directory, "other-ca")
    server = _signed(directory, "server", ca, "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    client = _signed(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    return Certs(ca[0], other[0], server[0], server[1], client[0], client[1])
