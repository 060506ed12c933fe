"""Writes the PKIs of the lazy-loading differential suite (issue 13) into a directory.

  ca_pki.py DIR

Each case is a CA file (CASE.pem), maybe certificates the program adds (CASE.add*.pem),
untrusted certificates sent with the leaf (CASE.untrusted.pem), leaves (CASE.leaf*.pem)
and a second CA file loaded after the leaves are verified, then listed, and the leaves
verified again (CASE.then.pem).
DIR/cases lists one case a line: NAME FLAGS, FLAGS a comma list of partial, no-trusted-first,
add-before (the program adds its certificates before loading the file), or "-".
"""
import base64
import datetime
import os
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NOW = datetime.datetime.now(datetime.timezone.utc)
DAY = datetime.timedelta(days=1)
SERIAL = [1000]


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def key():
    return ec.generate_private_key(ec.SECP256R1())


def cert(subject, subject_key, issuer=None, issuer_key=None, ca=True, path=None,
         begin=-1, end=30, dns=None, permitted=None):
    """A certificate for subject, signed by issuer (itself when None)."""
    SERIAL[0] += 1
    builder = (x509.CertificateBuilder()
               .subject_name(name(subject))
               .issuer_name(name(issuer or subject))
               .public_key(subject_key.public_key())
               .serial_number(SERIAL[0])
               .not_valid_before(NOW + begin * DAY)
               .not_valid_after(NOW + end * DAY)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=path), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]),
                                        critical=False)
    if permitted:
        builder = builder.add_extension(x509.NameConstraints(
            permitted_subtrees=[x509.DNSName(permitted)], excluded_subtrees=None), critical=True)
    return builder.sign(issuer_key or subject_key, hashes.SHA256())


def crl(issuer, issuer_key, revoked=()):
    builder = (x509.CertificateRevocationListBuilder().issuer_name(name(issuer))
               .last_update(NOW - DAY).next_update(NOW + 30 * DAY))
    for serial in revoked:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(NOW - DAY).build())
    return builder.sign(issuer_key, hashes.SHA256())


def pem(*objects):
    return b"".join(o.public_bytes(serialization.Encoding.PEM) for o in objects)


def main(out):
    cases = []

    def write(case, suffix, data):
        with open(os.path.join(out, case + suffix), "wb") as f:
            f.write(data)

    def leaf(cn, issuer, issuer_key, **kw):
        return cert(cn, key(), issuer, issuer_key, ca=False, dns="localhost", **kw)

    # Roots sharing a subject, the wrong one first; leaves under each.
    k1, k2 = key(), key()
    twin1, twin2 = cert("Twin Root", k1), cert("Twin Root", k2)
    write("twins", ".pem", pem(twin1, twin2))
    write("twins", ".leaf1.pem", pem(leaf("leaf of twin 2", "Twin Root", k2)))
    write("twins", ".leaf2.pem", pem(leaf("leaf of twin 1", "Twin Root", k1)))
    cases.append("twins -")

    # The program adds a certificate with a subject the file has: the right key, a wrong one.
    for flags in ("-", "add-before"):
        case = "added-" + ("after" if flags == "-" else "before")
        write(case, ".pem", pem(twin2))
        write(case, ".add1.pem", pem(twin1))
        write(case, ".leaf1.pem", pem(leaf("leaf of twin 2", "Twin Root", k2)))
        write(case, ".leaf2.pem", pem(leaf("leaf of twin 1", "Twin Root", k1)))
        cases.append(case + " " + flags)
    write("added-same", ".pem", pem(twin2))
    write("added-same", ".add1.pem", pem(twin2))
    write("added-same", ".leaf1.pem", pem(leaf("leaf of twin 2", "Twin Root", k2)))
    cases.append("added-same -")

    # A cross-signed root: the leaf's chain reaches the old root through the cross certificate.
    old_key, new_key, int_key = key(), key(), key()
    old = cert("Old Root", old_key)
    new = cert("New Root", new_key)
    cross = cert("New Root", new_key, "Old Root", old_key)
    inter = cert("Cross Intermediate", int_key, "New Root", new_key)
    cross_leaf = leaf("cross leaf", "Cross Intermediate", int_key)
    write("cross", ".pem", pem(old))
    write("cross", ".untrusted.pem", pem(inter, cross))
    write("cross", ".leaf1.pem", pem(cross_leaf))
    cases.append("cross -")
    write("cross-both", ".pem", pem(new, old))
    write("cross-both", ".untrusted.pem", pem(inter, cross))
    write("cross-both", ".leaf1.pem", pem(cross_leaf))
    cases.append("cross-both -")
    cases.append("cross-both no-trusted-first")

    # PARTIAL_CHAIN with only the intermediate in the file; TRUSTED_FIRST off with both.
    root_key, mid_key = key(), key()
    root = cert("Chain Root", root_key)
    mid = cert("Chain Intermediate", mid_key, "Chain Root", root_key)
    mid_leaf = leaf("chain leaf", "Chain Intermediate", mid_key)
    write("partial", ".pem", pem(mid))
    write("partial", ".leaf1.pem", pem(mid_leaf))
    cases.append("partial partial")
    cases.append("partial -")
    write("chain", ".pem", pem(root, mid))
    write("chain", ".untrusted.pem", pem(mid))
    write("chain", ".leaf1.pem", pem(mid_leaf))
    cases.append("chain no-trusted-first")
    cases.append("chain -")

    # Expired and not yet valid roots and intermediates, each before a valid twin.
    tk = key()
    expired_root = cert("Timed Root", tk, begin=-30, end=-1)
    future_root = cert("Timed Root", tk, begin=1, end=30)
    valid_root = cert("Timed Root", tk)
    write("timed", ".pem", pem(expired_root, future_root, valid_root))
    write("timed", ".leaf1.pem", pem(leaf("timed leaf", "Timed Root", tk)))
    cases.append("timed -")
    write("timed-only", ".pem", pem(expired_root))
    write("timed-only", ".leaf1.pem", pem(leaf("timed leaf", "Timed Root", tk)))
    cases.append("timed-only -")
    ik = key()
    expired_mid = cert("Timed Intermediate", ik, "Chain Root", root_key, begin=-30, end=-1)
    future_mid = cert("Timed Intermediate", ik, "Chain Root", root_key, begin=1, end=30)
    write("timed-intermediate", ".pem", pem(root, expired_mid, future_mid))
    write("timed-intermediate", ".leaf1.pem", pem(leaf("timed leaf", "Timed Intermediate", ik)))
    cases.append("timed-intermediate -")
    cases.append("timed-intermediate partial")

    # Name constraints and path length.
    nk, pk, pmk = key(), key(), key()
    constrained = cert("Constrained Root", nk, permitted="good.example")
    write("constraints", ".pem", pem(constrained))
    write("constraints", ".leaf1.pem", pem(cert("good", key(), "Constrained Root", nk, ca=False,
                                                 dns="www.good.example")))
    write("constraints", ".leaf2.pem", pem(cert("bad", key(), "Constrained Root", nk, ca=False,
                                                 dns="www.bad.example")))
    cases.append("constraints -")
    short = cert("Short Root", pk, path=0)
    short_mid = cert("Short Intermediate", pmk, "Short Root", pk, path=None)
    write("pathlen", ".pem", pem(short))
    write("pathlen", ".untrusted.pem", pem(short_mid))
    write("pathlen", ".leaf1.pem", pem(leaf("deep leaf", "Short Intermediate", pmk)))
    cases.append("pathlen -")

    # An unknown CA; duplicates in the file; a file with CRLs (loads eagerly).
    write("unknown", ".pem", pem(root, twin2))
    write("unknown", ".leaf1.pem", pem(leaf("stranger", "Nobody Root", key())))
    cases.append("unknown -")
    write("duplicates", ".pem", pem(twin2, root, twin2, mid, root))
    write("duplicates", ".leaf1.pem", pem(leaf("leaf of twin 2", "Twin Root", k2)))
    write("duplicates", ".leaf2.pem", pem(mid_leaf))
    cases.append("duplicates -")
    cases.append("duplicates partial")
    write("crls", ".pem", pem(root, mid) + pem(crl("Chain Root", root_key)))
    write("crls", ".leaf1.pem", pem(mid_leaf))
    cases.append("crls -")

    # Not in subject order (C, B, A) and ending with a repeat: enumeration order.
    write("order", ".pem", pem(twin2, old, root, new))
    write("order", ".leaf1.pem", pem(mid_leaf))
    cases.append("order -")
    write("order-repeat", ".pem", pem(twin2, old, root, new, old))
    write("order-repeat", ".leaf1.pem", pem(leaf("leaf of twin 2", "Twin Root", k2)))
    cases.append("order-repeat -")

    # 3.5 looks for a duplicate only in the first run of same-subject objects, in the
    # store's order (load order until a lookup sorts it): twins apart in the file keep a
    # repeat of the second, and what a later add or file meets depends on that order.
    write("twins-apart", ".pem", pem(twin1, root, twin2, twin2))
    write("twins-apart", ".leaf1.pem", pem(leaf("leaf of twin 2", "Twin Root", k2)))
    write("twins-apart", ".leaf2.pem", pem(leaf("leaf of twin 1", "Twin Root", k1)))
    cases.append("twins-apart -")
    write("added-apart", ".pem", pem(twin1, root, twin2))
    write("added-apart", ".add1.pem", pem(twin2))
    write("added-apart", ".leaf1.pem", pem(leaf("leaf of twin 2", "Twin Root", k2)))
    cases.append("added-apart -")
    cases.append("added-apart add-before")
    # A second file loaded after a verification sorted the store (CASE.then.pem).
    write("then-load", ".pem", pem(twin2, old, root, new))
    write("then-load", ".leaf1.pem", pem(mid_leaf))
    write("then-load", ".leaf2.pem", pem(leaf("leaf of twin 1", "Twin Root", k1)))
    write("then-load", ".then.pem", pem(twin1, root, twin2, twin2, new, twin1))
    cases.append("then-load -")
    write("then-new", ".pem", pem(root))
    write("then-new", ".leaf1.pem", pem(mid_leaf))
    write("then-new", ".then.pem", pem(twin2, old, new))
    cases.append("then-new -")

    # Malformed in a way only a full decoder sees: an OID with a 0x80 lead byte (loading
    # fails), and a version of 5 (3.0 takes it). Plus the valid root before it.
    def corrupt(certificate, find, replace):
        der = certificate.public_bytes(serialization.Encoding.DER)
        assert find in der
        der = der.replace(find, replace, 1)
        body = base64.encodebytes(der).decode().replace("\n", "")
        lines = [body[i:i + 64] for i in range(0, len(body), 64)]
        return ("-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) +
                "\n-----END CERTIFICATE-----\n").encode()
    ecdsa_sha256 = bytes([0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02])
    write("malformed-oid", ".pem", pem(root) + corrupt(twin1, ecdsa_sha256,
                                                       ecdsa_sha256[:2] + b"\x80" + ecdsa_sha256[3:]))
    write("malformed-oid", ".leaf1.pem", pem(mid_leaf))
    cases.append("malformed-oid -")
    write("version-5", ".pem", pem(root) + corrupt(twin1, bytes([0xa0, 0x03, 0x02, 0x01, 0x02]),
                                                   bytes([0xa0, 0x03, 0x02, 0x01, 0x05])))
    write("version-5", ".leaf1.pem", pem(leaf("leaf of twin 1", "Twin Root", k1)))
    cases.append("version-5 -")

    with open(os.path.join(out, "cases"), "w") as f:
        f.write("\n".join(cases) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
