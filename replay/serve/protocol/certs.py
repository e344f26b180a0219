"""serve's TLS: the certificate it offers when given none, and what a MariaDB 11.4+
replica checks it by (pure but for the key's randomness).

With no ``--ssl-cert``, serve makes a self-signed certificate at start, as mariadbd
11.4+ does when it has none (EC P-256, valid a year, named after the host), so that
every replica can use TLS with its defaults. A MariaDB 11.4+ client verifies a
certificate it cannot chain to a CA from the password instead (MDEV-31855): after a
mysql_native_password login over TLS, the server's OK packet carries
``0x01 || HEX(SHA256(SHA1(SHA1(password)) || scramble || SHA256(certificate DER)))``,
which only a server that knows the password's hash and holds the certificate the
client saw can give (``cert_proof``).
"""

import datetime
import hashlib
import socket
import ssl


def self_signed(name=None):
    """(certificate PEM, private key PEM) of a new self-signed certificate for ``name``
    (default: this host's name), with ``localhost`` and 127.0.0.1 among its names."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    name = name or socket.gethostname() or "localhost"
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"mysqlbackup serve {name}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName(name), x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def fingerprint(cert_pem):
    """SHA-256 of the DER form of the first certificate in ``cert_pem`` (bytes)."""
    text = cert_pem.decode("ascii", "replace")
    end = text.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(text[:end])).digest()


def cert_proof(stored_hash, scramble, cert_fingerprint):
    """What MariaDB's OK packet carries after a mysql_native_password login over TLS:
    the client checks it against the password it knows (``stored_hash``: SHA1(SHA1(
    password)), the login's ``scramble``, the certificate's SHA-256 fingerprint)."""
    digest = hashlib.sha256(stored_hash + scramble + cert_fingerprint).hexdigest().upper()
    return b"\x01" + digest.encode("ascii")
