"""A run's own certificate authority for OpenFlow over TLS.

Switches on other machines reach the controller over TLS, each side proving itself
with a certificate signed by a CA made for the run and removed with it: nothing a
run leaves behind can admit a later connection. ``make_pki`` is pure (keys and
PEM bytes in memory); ``RunPKI`` writes them into a folder only root can read and
removes them on exit.

The controller's certificate names the addresses it listens on (``127.0.0.1`` and
any cluster address); the switches share one certificate (``kvfabric-switch``):
what the controller checks is that a switch holds a key the run's CA signed.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=2)  # a run is hours long; the CA dies with it anyway
FILES = ("ca.pem", "controller.pem", "controller.key", "switch.pem", "switch.key")


def _name(common: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kvfabric run"),
            x509.NameAttribute(NameOID.COMMON_NAME, common),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    signer: ec.EllipticCurvePrivateKey,
    now: dt.datetime,
    *,
    ca: bool = False,
    addresses: Sequence[str] = (),
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
    )
    if addresses:
        alt = [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    if usage is not None:
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return b.sign(signer, hashes.SHA256())


def make_pki(
    addresses: Sequence[str] = ("127.0.0.1",), now: dt.datetime | None = None
) -> dict[str, bytes]:
    """A fresh CA, the controller's certificate for ``addresses`` and the switches'
    certificate, as ``{file name: PEM bytes}`` (``FILES``)."""
    now = now or dt.datetime.now(dt.UTC)
    ca_key, ctl_key, sw_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca_name = _name("kvfabric run CA")
    ca = _cert("kvfabric run CA", ca_key, ca_name, ca_key, now, ca=True)
    ctl = _cert(
        "kvfabric-controller",
        ctl_key,
        ca_name,
        ca_key,
        now,
        addresses=addresses,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    sw = _cert(
        "kvfabric-switch", sw_key, ca_name, ca_key, now, usage=ExtendedKeyUsageOID.CLIENT_AUTH
    )
    pem = serialization.Encoding.PEM
    return {
        "ca.pem": ca.public_bytes(pem),
        "controller.pem": ctl.public_bytes(pem),
        "controller.key": _key_pem(ctl_key),
        "switch.pem": sw.public_bytes(pem),
        "switch.key": _key_pem(sw_key),
    }


@dataclass(frozen=True)
class TlsFiles:
    """Where a run's PKI is on disk."""

    folder: Path

    def path(self, name: str) -> Path:
        if name not in FILES:
            raise KeyError(f"{name!r}: one of {', '.join(FILES)}")
        return self.folder / name


class RunPKI:
    """``make_pki`` written to a fresh folder (mode 0700, keys 0600) on enter and
    removed on exit, whatever happens."""

    def __init__(self, addresses: Sequence[str] = ("127.0.0.1",), parent: Path | None = None):
        self.addresses = tuple(addresses)
        self.parent = parent
        self.files: TlsFiles | None = None

    def __enter__(self) -> TlsFiles:
        if self.parent is not None:
            self.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="kvf-tls-", dir=self.parent))
        self.files = TlsFiles(folder)
        try:
            for name, data in make_pki(self.addresses).items():
                path = folder / name
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return self.files

    def __exit__(self, *exc: object) -> None:
        if self.files is not None:
            shutil.rmtree(self.files.folder, ignore_errors=True)
            self.files = None
