"""Ed25519 keys in NATS's nkey form: who a principal is, and who signed a log entry.

A principal (a coordinator, an agent, an operator) authenticates to nats-server with an
nkey: the server's config holds only its public key (`U...`), the principal keeps the
seed (`SU...`). A tenant's coordinators also share one signing key, with which they sign
every log entry and every answer to a proposal; replicas and proposers check those
signatures against the tenant's public signing key, so a client that got past the
server's permissions still cannot forge a commit or an answer.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Final

import nacl.exceptions
import nacl.signing
import nkeys

from ctxbus.schemas import UsageError

__all__ = [
    "SIGNATURE_HEADER",
    "SIGNER_HEADER",
    "KeyInvalid",
    "Signer",
    "Verifier",
    "new_seed",
    "public_key_of",
    "sealed_by",
]

_SEED_PREFIX: Final = "SU"
_PUBLIC_PREFIX: Final = "U"
SIGNER_HEADER: Final = "Ctxbus-Signer"
"""Header of a signed message: the public key it was signed with."""
SIGNATURE_HEADER: Final = "Ctxbus-Signature"
"""Header of a signed message: the signature of its payload, base64."""


class KeyInvalid(UsageError):
    """Raised when a seed or public key is not a valid nkey of a NATS user."""


def new_seed() -> str:
    """A new user seed (`SU...`): keep it private, mode 0600."""
    raw = bytes(nacl.signing.SigningKey.generate())
    seed: bytes = nkeys.encode_seed(raw, nkeys.PREFIX_BYTE_USER)
    return seed.decode()


def public_key_of(seed: str) -> str:
    """The public key (`U...`) of a user seed.

    :raises KeyInvalid: if `seed` is not a user seed.
    """
    return _keypair(seed).public_key.decode()  # type: ignore[no-any-return]


def _keypair(seed: str) -> nkeys.KeyPair:
    if not seed.startswith(_SEED_PREFIX):
        raise KeyInvalid(f"not an nkey user seed (it should start with {_SEED_PREFIX!r})")
    try:
        return nkeys.from_seed(bytearray(seed.encode()))
    except (nkeys.NkeysError, binascii.Error, ValueError) as exc:
        raise KeyInvalid(f"not a valid nkey user seed: {type(exc).__name__}") from None


def _raw_public(key: str) -> bytes:
    """The 32 bytes of an encoded user public key, its checksum checked."""
    if not key.startswith(_PUBLIC_PREFIX):
        raise KeyInvalid(f"{key[:12]!r}... is not an nkey user public key (it should start with {_PUBLIC_PREFIX!r})")
    try:
        decoded = base64.b32decode(key + "=" * (-len(key) % 8))
    except (binascii.Error, ValueError):
        raise KeyInvalid(f"{key[:12]!r}... is not valid base32") from None
    body, checksum = decoded[:-2], decoded[-2:]
    if len(body) != 33 or body[0] != nkeys.PREFIX_BYTE_USER or nkeys.crc16(body).to_bytes(2, "little") != checksum:
        raise KeyInvalid(f"{key[:12]!r}... is not an nkey user public key (bad length, kind or checksum)")
    return bytes(body[1:])


class Signer:
    """Signs with one seed; `public_key` is what verifiers must trust."""

    __slots__ = ("_key", "public_key")

    def __init__(self, seed: str) -> None:
        pair = _keypair(seed)
        self._key = nacl.signing.SigningKey(bytes(pair._keys))  # nkeys keeps the nacl key there
        self.public_key: str = pair.public_key.decode()

    def __repr__(self) -> str:
        return f"<Signer {self.public_key[:12]}...>"

    def sign(self, data: bytes) -> bytes:
        """The 64-byte ed25519 signature of `data`."""
        return bytes(self._key.sign(data).signature)

    def seal(self, data: bytes) -> dict[str, str]:
        """The headers that carry the signature of a message whose payload is `data`."""
        return {SIGNER_HEADER: self.public_key, SIGNATURE_HEADER: base64.b64encode(self.sign(data)).decode()}


class Verifier:
    """Checks signatures against a fixed set of trusted public keys."""

    __slots__ = ("_keys",)

    def __init__(self, trusted: Iterable[str]) -> None:
        """:raises KeyInvalid: if a key is not an nkey user public key."""
        self._keys = {key: nacl.signing.VerifyKey(_raw_public(key)) for key in trusted}
        if not self._keys:
            raise UsageError("a verifier needs at least one trusted key")

    def __repr__(self) -> str:
        return f"<Verifier trusting {len(self._keys)} keys>"

    @property
    def trusted(self) -> frozenset[str]:
        return frozenset(self._keys)

    def verify(self, data: bytes, signature: bytes, signer: str) -> bool:
        """Whether `signature` is `signer`'s over `data`, and `signer` is trusted."""
        key = self._keys.get(signer)
        if key is None:
            return False
        try:
            key.verify(data, signature)
        except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
            return False
        return True


def sealed_by(verifier: Verifier, data: bytes, headers: Mapping[str, str] | None) -> bool:
    """Whether a message with payload `data` and `headers` carries a valid signature by a
    key `verifier` trusts (see `Signer.seal`)."""
    if not headers or SIGNER_HEADER not in headers or SIGNATURE_HEADER not in headers:
        return False
    try:
        signature = base64.b64decode(headers[SIGNATURE_HEADER], validate=True)
    except (binascii.Error, ValueError):
        return False
    return verifier.verify(data, signature, headers[SIGNER_HEADER])
