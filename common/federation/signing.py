"""Ed25519 signing of federation envelopes, and the on-disk form of signing keys.

Every model or refusal an owner sends travels as a `SignedEnvelope`: the signature covers exactly
the payload bytes, so the receiver verifies before it parses anything. A signer is named by its
key id, the lowercase hex SHA-256 of the raw 32-byte public key, which the roster maps to a party.

Key files are PKCS8 PEM, unencrypted (the file mode is the protection, as for ssh keys): they are
written atomically with mode 0600 set before any key byte reaches the disk, and reading refuses a
file that group or others can access (`modelshare.common.files.atomic_write`). `require_private_file` is
shared with the other readers of kit material (`modelshare.common.federation.kit`, `modelshare.provision`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from modelshare.common.federation.pb import federation_pb2
from modelshare.common.files import atomic_write

__all__ = [
    "KEY_ID_PREFIX",
    "SignatureError",
    "generate_signing_key",
    "key_id",
    "load_signing_key",
    "public_key_from_text",
    "public_key_to_text",
    "require_private_file",
    "save_signing_key",
    "sign_payload",
    "verify_envelope",
]

RAW_PUBLIC_KEY_BYTES = 32
KEY_ID_PREFIX = 16  # hex characters of a key id shown in messages


class SignatureError(ValueError):
    """Signing material or a signature that cannot be trusted.

    Raised for a signature that does not verify, an envelope naming another signer, public key
    text that is not a raw Ed25519 key, and a key file that is missing, unreadable, exposed to
    other users or not an Ed25519 key. The message names the file or field at fault.
    """


def generate_signing_key() -> Ed25519PrivateKey:
    """A fresh Ed25519 private key from the operating system's random source."""
    return Ed25519PrivateKey.generate()


def _raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public_key: Ed25519PublicKey) -> str:
    """The signer id of a key: lowercase hex SHA-256 of its raw 32 bytes (64 characters, stable)."""
    return hashlib.sha256(_raw(public_key)).hexdigest()


def public_key_to_text(public_key: Ed25519PublicKey) -> str:
    """Standard base64 of the raw 32-byte public key, the roster's form."""
    return base64.b64encode(_raw(public_key)).decode("ascii")


def public_key_from_text(text: str, *, where: str) -> Ed25519PublicKey:
    """Parse `public_key_to_text` output; `where` (file and field) names the text in errors."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise SignatureError(f"{where}: not base64 text of an Ed25519 public key ({exc})") from None
    if len(raw) != RAW_PUBLIC_KEY_BYTES:
        raise SignatureError(
            f"{where}: an Ed25519 public key is {RAW_PUBLIC_KEY_BYTES} bytes, this base64 decodes to {len(raw)}"
        )
    return Ed25519PublicKey.from_public_bytes(raw)


def require_private_file(path: str | Path, what: str) -> None:
    """Refuse, as ssh does, a secret file that is missing or that group or others may access."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        raise SignatureError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise SignatureError(f"{what} {path}: cannot inspect: {exc.strerror}") from None
    if mode & 0o077:
        raise SignatureError(
            f"{what} {path} is accessible by other users (mode {mode:04o}); "
            f"a private key must be readable by its owner only: run `chmod 600 {path}`"
        )


def save_signing_key(key: Ed25519PrivateKey, path: str | Path) -> None:
    """Write `key` as unencrypted PKCS8 PEM, atomically, mode 0600."""
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    atomic_write(path, pem, mode=0o600)


def load_signing_key(path: str | Path) -> Ed25519PrivateKey:
    """Read a key written by `save_signing_key`, refusing files other users can read."""
    require_private_file(path, "signing key")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SignatureError(f"signing key {path}: cannot read: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SignatureError(f"signing key {path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError(f"signing key {path}: holds a {type(key).__name__}, not an Ed25519 key")
    return key


def sign_payload(payload: bytes, key: Ed25519PrivateKey) -> federation_pb2.SignedEnvelope:
    """Sign exactly `payload` and wrap it with the signer's key id."""
    return federation_pb2.SignedEnvelope(
        payload=payload, signer_key_id=key_id(key.public_key()), signature=key.sign(payload)
    )


def verify_envelope(envelope: federation_pb2.SignedEnvelope, public_key: Ed25519PublicKey) -> bytes:
    """Return the payload of `envelope` if `public_key` signed it; raise `SignatureError` otherwise.

    The envelope must also name that key as its signer, so a payload cannot be re-attributed.
    """
    expected = key_id(public_key)
    if envelope.signer_key_id != expected:
        raise SignatureError(
            f"envelope names signer key {envelope.signer_key_id[:KEY_ID_PREFIX]!r}, "
            f"expected key {expected[:KEY_ID_PREFIX]}"
        )
    try:
        public_key.verify(envelope.signature, envelope.payload)
    except InvalidSignature:
        raise SignatureError(f"signature does not verify for key {expected[:KEY_ID_PREFIX]}") from None
    return envelope.payload
