"""A throwaway PKI for the TLS tests (the ``cryptography`` package, a test dependency in
setup.cfg): a CA, a server certificate for 127.0.0.1 and localhost, one for another host
name only (db.example.com), a client certificate and a second, unrelated CA. Import it
after ``pytest.importorskip("cryptography.x509")``."""

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

STEMS = ("ca", "server", "otherhost", "client", "wrongca")


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def issue(directory, stem, cn, issuer=None, ca=False, sans=()):
    """A key and a certificate (PEM files STEM.key, STEM.pem in ``directory``, a
    pathlib.Path) signed by ``issuer`` ((key, certificate)), or self-signed; returns
    (key, certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    signer_key, signer_name = issuer if issuer else (key, None)
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(
                   signer_name.subject if signer_name else _name(cn))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)),
                                        critical=False)
    cert = builder.sign(signer_key, hashes.SHA256())
    (directory / f"{stem}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def make_pki(directory, client_cn):
    """Certificates in ``directory``: {STEM: its certificate's path, STEM_key: its key's}
    for STEMS: the CA, the server (127.0.0.1/localhost), the other host (db.example.com),
    the client (CN ``client_cn``) and the wrong CA (another self-signed CA)."""
    ca = issue(directory, "ca", "mysqlbackup test CA", ca=True)
    issue(directory, "server", "source", ca,
          sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    issue(directory, "otherhost", "target", ca, sans=[x509.DNSName("db.example.com")])
    issue(directory, "client", client_cn, ca)
    issue(directory, "wrongca", "another CA", ca=True)
    paths = {}
    for stem in STEMS:
        paths[stem] = str(directory / f"{stem}.pem")
        paths[f"{stem}_key"] = str(directory / f"{stem}.key")
    return paths
