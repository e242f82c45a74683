"""Ed25519 envelopes and signing key files (`modelshare.common.federation.signing`)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.signing import (
    SignatureError,
    generate_signing_key,
    key_id,
    load_signing_key,
    public_key_from_text,
    public_key_to_text,
    save_signing_key,
    sign_payload,
    verify_envelope,
)


def _flip(data: bytes, index: int) -> bytes:
    changed = bytearray(data)
    changed[index] ^= 1
    return bytes(changed)


def test_sign_verify_round_trip_through_the_wire():
    key = generate_signing_key()
    envelope = sign_payload(b"model bytes", key)
    received = fpb.SignedEnvelope.FromString(envelope.SerializeToString())
    assert verify_envelope(received, key.public_key()) == b"model bytes"
    assert received.signer_key_id == key_id(key.public_key())


@pytest.mark.parametrize("field", ["payload", "signature"])
@pytest.mark.parametrize("index", [0, -1])
def test_a_flipped_bit_is_rejected(field, index):
    key = generate_signing_key()
    envelope = sign_payload(b"the exact bytes that were signed", key)
    setattr(envelope, field, _flip(getattr(envelope, field), index))
    with pytest.raises(SignatureError, match="signature does not verify for key " + key_id(key.public_key())[:16]):
        verify_envelope(envelope, key.public_key())


def test_another_key_is_rejected_even_when_the_envelope_names_it():
    key, other = generate_signing_key(), generate_signing_key()
    envelope = sign_payload(b"payload", key)
    with pytest.raises(SignatureError, match="expected key"):
        verify_envelope(envelope, other.public_key())
    envelope.signer_key_id = key_id(other.public_key())
    with pytest.raises(SignatureError, match="does not verify"):
        verify_envelope(envelope, other.public_key())


def test_a_payload_cannot_be_reattributed():
    key = generate_signing_key()
    envelope = sign_payload(b"payload", key)
    envelope.signer_key_id = "0" * 64
    with pytest.raises(SignatureError, match="names signer key"):
        verify_envelope(envelope, key.public_key())


def test_key_id_is_sha256_of_the_raw_public_key_and_stable():
    key = generate_signing_key()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert len(raw) == 32
    assert key_id(key.public_key()) == hashlib.sha256(raw).hexdigest()
    reloaded = public_key_from_text(public_key_to_text(key.public_key()), where="test")
    assert key_id(reloaded) == key_id(key.public_key())
    assert len(key_id(reloaded)) == 64 and key_id(reloaded) == key_id(reloaded).lower()


def test_public_key_text_is_base64_of_raw_bytes():
    key = generate_signing_key()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert base64.b64decode(public_key_to_text(key.public_key())) == raw


@pytest.mark.parametrize(
    "text, fragment",
    [("not base64!", "not base64"), (base64.b64encode(b"short").decode(), "decodes to 5"), ("é", "not base64")],
)
def test_bad_public_key_text_names_where(text, fragment):
    with pytest.raises(SignatureError, match=f"roster.json: parties\\[3\\].signing_key: .*{fragment}"):
        public_key_from_text(text, where="roster.json: parties[3].signing_key")


def test_key_file_is_0600_and_round_trips(tmp_path):
    key = generate_signing_key()
    path = tmp_path / "signing.key"
    save_signing_key(key, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert key_id(load_signing_key(path).public_key()) == key_id(key.public_key())
    assert [p.name for p in tmp_path.iterdir()] == ["signing.key"]  # no temporary file left behind


def test_saving_replaces_an_existing_key_keeping_0600(tmp_path):
    path = tmp_path / "signing.key"
    save_signing_key(generate_signing_key(), path)
    key = generate_signing_key()
    save_signing_key(key, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key_id(load_signing_key(path).public_key()) == key_id(key.public_key())


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_key_others_can_read_is_refused(tmp_path, mode):
    path = tmp_path / "signing.key"
    save_signing_key(generate_signing_key(), path)
    os.chmod(path, mode)
    expected = f"(mode {mode:04o}); a private key must be readable by its owner only: run `chmod 600 {path}`"
    with pytest.raises(SignatureError, match=re.escape(expected)):
        load_signing_key(path)


def test_missing_key_file_names_the_path(tmp_path):
    with pytest.raises(SignatureError, match=re.escape(f"{tmp_path / 'nope.key'} does not exist")):
        load_signing_key(tmp_path / "nope.key")


def test_non_key_and_non_ed25519_files_are_refused(tmp_path):
    garbage = tmp_path / "garbage.key"
    garbage.write_bytes(b"hello")
    os.chmod(garbage, 0o600)
    with pytest.raises(SignatureError, match=re.escape(f"{garbage}: not an unencrypted PEM private key")):
        load_signing_key(garbage)
    ec_key = tmp_path / "ec.key"
    ec_key.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    os.chmod(ec_key, 0o600)
    with pytest.raises(SignatureError, match=re.escape(f"{ec_key}: holds a ") + ".*, not an Ed25519 key"):
        load_signing_key(ec_key)
