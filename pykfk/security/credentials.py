"""SCRAM credentials kept in the metadata store, as the SASL layer looks them up."""

from __future__ import annotations

from typing import Any

from pykfk.errors import KafkaError
from pykfk.security.sasl import AuthenticationError
from pykfk.security.scram import ScramCredential, ScramError


async def scram_credential(store: Any, user: str, mechanism: str) -> ScramCredential | None:
    """The user's credential for ``mechanism``; None when there is none (or it is
    unreadable: the login then fails like one of an unknown user). AuthenticationError
    when the store cannot be read (ZooKeeper unreachable; the store logged why): the
    login fails with that reason and the connection stays."""
    try:
        texts = await store.scram_credentials([user])
    except KafkaError as exc:
        raise AuthenticationError(f"the credentials of {user} could not be read: {exc.message}") from None
    text = texts.get(user, {}).get(mechanism)
    if text is None:
        return None
    try:
        return ScramCredential.from_text(text)
    except ScramError:
        return None
