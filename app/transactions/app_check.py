"""Asking the app about an undecided transaction: ``transactions.check_endpoint``, on this machine as
subscription endpoints are, is POSTed ``{"id", "transactionKey", "topic"}`` and answers
``{"state": "COMMIT" | "ROLLBACK" | "UNKNOWN"}``, as Java's TransactionListener.checkLocalTransaction.
Anything else (an error status, a timeout, an oversized or unreadable answer) counts as UNKNOWN: the
broker asks again later, so doubt never turns into a decision.

A broker checks every undecided half of the group in a burst, each check its own task: at most
MAX_IN_FLIGHT of them ask the app at once (one connection each) and MAX_WAITING wait their turn; past
that a check is answered UNKNOWN at once, without asking (a hanging app held a socket per check: 2 000
checks, 2 000 connections)."""

from __future__ import annotations

import asyncio
import logging

import orjson

from rocksidecar.rmq.producer.transaction import TransactionState

from ..http_client import HttpClient, PostError
from ..localhost import local_url_error
from ..logs import Throttle

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 4096
MAX_IN_FLIGHT = 8  # asks at once
MAX_WAITING = 1024  # asks waiting for one of those; more are answered UNKNOWN without asking
_STATES = {s.name: s for s in TransactionState}
_HEADERS = {"content-type": "application/json"}


class AppCheck:
    def __init__(self, url: str, client: HttpClient, *, timeout_s: float = 5.0) -> None:
        """Raises ValueError when ``url`` is not an http:// URL of this machine. ``client``: app/'s one
        HTTP client (bounded answers, keep-alive, no proxy), the caller's to close."""
        error = local_url_error(url)
        if error is not None:
            raise ValueError(f"transactions.check_endpoint: {error}")
        self.url = url
        self._client = client
        self._timeout_s = timeout_s
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._asking = 0  # in flight and waiting
        self._throttle = Throttle()  # a burst of checks is one line per cause and window

    async def __call__(self, tx_id: str, transaction_key: str | None, topic: str = "") -> TransactionState:
        if self._asking >= MAX_IN_FLIGHT + MAX_WAITING:
            self._unknown(tx_id, f"{self._asking} checks ask the app already", "busy")
            return TransactionState.UNKNOWN
        self._asking += 1
        try:
            async with self._slots:
                return await self._ask(tx_id, transaction_key, topic)
        finally:
            self._asking -= 1

    async def _ask(self, tx_id: str, transaction_key: str | None, topic: str) -> TransactionState:
        doc = {"id": tx_id, "transactionKey": transaction_key, "topic": topic}
        try:
            answer = await self._client.request(self.url, orjson.dumps(doc), _HEADERS, self._timeout_s)
            if len(answer.body) > MAX_ANSWER_BYTES:
                raise ValueError(f"answer longer than {MAX_ANSWER_BYTES} bytes")
            if answer.status // 100 != 2:
                raise ValueError(f"HTTP {answer.status}")
            return _STATES[orjson.loads(answer.body).get("state")]
        except (PostError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self._unknown(tx_id, f"{self.url}: {exc}", type(exc).__name__)
            return TransactionState.UNKNOWN

    def _unknown(self, tx_id: str, why: str, cause: str) -> None:
        suppressed = self._throttle.allow((cause,))
        if suppressed is not None:
            more = f" ({suppressed} more for this cause since the last such line)" if suppressed else ""
            log.warning("check of transaction %s: %s; answering UNKNOWN%s", tx_id, why, more)
