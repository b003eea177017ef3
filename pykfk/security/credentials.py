"""SCRAM credentials and delegation tokens kept in the metadata store, as the SASL layer
looks them up, and the periodic removal of expired tokens from it
(``delegation.token.expiry.check.interval.ms``, Kafka's expired-token task)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

from pykfk.errors import KafkaError
from pykfk.security.sasl import AuthenticationError, TokenLogin
from pykfk.security.scram import ScramCredential, ScramError
from pykfk.security.tokens import TokenSettings, plausible_token_id, token_credential

log = logging.getLogger("pykfk.security")


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


def token_settings(config: Any) -> TokenSettings:
    """The ``delegation.token.*`` settings of a broker config."""
    return TokenSettings(config["delegation.token.secret.key"] or "", config["delegation.token.max.lifetime.ms"],
                         config["delegation.token.expiry.time.ms"])


# Deriving a credential costs a PBKDF2 of the HMAC: once per token and mechanism (Kafka
# keeps them in its token cache likewise).
_token_credential = functools.lru_cache(maxsize=1024)(token_credential)


async def token_login(store: Any, settings: TokenSettings, token_id: str, mechanism: str) -> TokenLogin | None:
    """The login of the live token ``token_id``; None when tokens are disabled or the
    token is unknown or expired. AuthenticationError when the store cannot be read."""
    if not settings.enabled or not plausible_token_id(token_id):
        return None
    try:
        tokens = await store.delegation_tokens([token_id])
    except KafkaError as exc:
        raise AuthenticationError(f"the delegation token could not be read: {exc.message}") from None
    token = tokens.get(token_id)
    if token is None or token.expired(int(time.time() * 1000)):
        return None
    return TokenLogin(_token_credential(settings.secret, token_id, mechanism), token.owner.partition(":")[2],
                      token.expiry_ms)


async def remove_expired_tokens(store: Any, now_ms: int | None = None) -> list[str]:
    """Remove the stored tokens past their expiry or maximum lifetime; their ids."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    gone = sorted(i for i, token in (await store.delegation_tokens()).items() if token.expired(now))
    if gone:
        await store.remove_delegation_tokens(gone)
    return gone


class ExpiredTokenSweep:
    """Every ``interval_ms``, expired delegation tokens are removed from the store (in
    ZooKeeper every broker may do it: a removal of a removed token is none). Loop-affine."""

    def __init__(self, store: Any, interval_ms: int):
        self._store = store
        self._interval_s = interval_ms / 1000
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="expired-token-sweep")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                gone = await remove_expired_tokens(self._store)
            except Exception as exc:  # noqa: BLE001 - the store unreachable: try again next time
                log.warning("expired delegation tokens not removed: %s", exc)
                continue
            if gone:
                log.info("removed %d expired delegation tokens: %s", len(gone), ", ".join(gone))

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
