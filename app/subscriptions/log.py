"""The operator's log of subscriptions: the app failing a delivery (5xx, 4xx), asking for later
(429/503), not answering, and messages moved to the group's DLQ. These come in storms (every message
while the app is down), so one line per cause, then one summary per window of how many more there were
(app.logs.Throttle, as the send side's events). Never a message body: ids, statuses and reasons only.
"""

from __future__ import annotations

import logging

from ..events import OpsEvents, cause

log = logging.getLogger("rocksidecar.subscriptions")


class DeliveryLog(OpsEvents):
    """Shared by every subscription of the process. The throttling and the summaries are OpsEvents'
    (one cause, one key); ``flush()`` writes the summaries of finished windows: the runner calls it
    every window."""

    default_logger = log

    def answered(self, subscription: str, status: int, msg_id: str) -> None:
        """The app answered a status that is not 2xx: a failure, or 429/503 (later)."""
        later = status in (429, 503)
        self._throttled(
            logging.INFO if later else logging.WARNING,
            "subscription_later" if later else "subscription_failed",
            {"subscription": subscription, "status": status},
            "subscription %s: the app answered %d for message %s%s",
            (subscription, status, msg_id, " (later: offered again)" if later else ""),
            {"msg_id": msg_id},
        )

    def no_answer(self, subscription: str, reason: str, msg_id: str) -> None:
        """No usable answer: refused, dropped, timed out, or an answer over the client's bounds."""
        self._throttled(
            logging.WARNING,
            "subscription_no_answer",
            {"subscription": subscription, "reason_kind": cause(reason)},
            "subscription %s: no usable answer from the app for message %s: %s",
            (subscription, msg_id, reason),
            {"msg_id": msg_id, "reason": reason},
        )

    def moved_to_dlq(self, subscription: str, group: str, msg_id: str, why: str) -> None:
        self._throttled(
            logging.ERROR,
            "subscription_dead_lettered",
            {"subscription": subscription, "dlq": f"%DLQ%{group}"},
            "subscription %s: message %s moved to %%DLQ%%%s (%s)",
            (subscription, msg_id, group, why),
            {"msg_id": msg_id, "why": why},
        )
