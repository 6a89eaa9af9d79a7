"""Asking the app about an undecided transaction: ``transactions.check_endpoint``, on this machine as
subscription endpoints are, is POSTed ``{"id", "transactionKey", "topic"}`` and answers
``{"state": "COMMIT" | "ROLLBACK" | "UNKNOWN"}``, as Java's TransactionListener.checkLocalTransaction.
Anything else (an error status, a timeout, an oversized or unreadable answer) counts as UNKNOWN: the
broker asks again later, so doubt never turns into a decision."""

from __future__ import annotations

import logging

import orjson

from rocksidecar.rmq.producer.transaction import TransactionState

from ..http_client import HttpClient, PostError
from ..localhost import local_url_error

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 4096
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

    async def __call__(self, tx_id: str, transaction_key: str | None, topic: str = "") -> TransactionState:
        doc = {"id": tx_id, "transactionKey": transaction_key, "topic": topic}
        try:
            answer = await self._client.request(self.url, orjson.dumps(doc), _HEADERS, self._timeout_s)
            if len(answer.body) > MAX_ANSWER_BYTES:
                raise ValueError(f"answer longer than {MAX_ANSWER_BYTES} bytes")
            if answer.status // 100 != 2:
                raise ValueError(f"HTTP {answer.status}")
            return _STATES[orjson.loads(answer.body).get("state")]
        except (PostError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("check of transaction %s at %s: %s; answering UNKNOWN", tx_id, self.url, exc)
            return TransactionState.UNKNOWN
