"""The commit window: how far past the offset the broker has acknowledged a queue may be handed out.

Java persists offsets every 5 s, so a consumer killed without a word redelivers whatever it finished
in the last 5 s: the duplicates grow with the rate, not with anything in flight. With a window of N,
no message at or beyond ``persisted + N`` reaches the listener until a persist that covers more has
been acknowledged, so after a SIGKILL at most N messages per owned queue come again. The consumer
persists a queue as soon as its committed offset has moved half a window, one persist in flight per
queue, so the hand-out rarely waits.

Pure bookkeeping, no I/O: the push consumer pulls, persists and calls these.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..message import MessageExt


@dataclass(eq=False)
class QueueWindow:
    size: int  # N; 0 turns the window off (Java's behaviour)
    persisted: int  # the offset the broker has acknowledged for this queue (or the start offset)
    held: deque[MessageExt] = field(default_factory=deque)  # pulled, waiting for the window
    persisting: bool = False  # one persist in flight per queue

    @property
    def limit(self) -> int:
        """Offsets below this may be handed out."""
        return self.persisted + self.size

    def admit(self, messages: Iterable[MessageExt]) -> list[MessageExt]:
        """What of a pulled batch (and of what waited before it) may go to the listener now."""
        if not self.size:
            return list(messages)
        self.held.extend(messages)
        return self._release()

    def acknowledged(self, offset: int) -> list[MessageExt]:
        """The broker acknowledged ``offset``: what may go to the listener now."""
        self.persisted = max(self.persisted, offset)
        return self._release() if self.size else []

    def wants_persist(self, committed: int) -> bool:
        """Whether the committed offset has moved far enough past the acknowledged one to persist now."""
        return (
            bool(self.size) and not self.persisting and committed - self.persisted >= max(1, self.size // 2)
        )

    def _release(self) -> list[MessageExt]:
        out: list[MessageExt] = []
        held, limit = self.held, self.limit
        while held and held[0].queue_offset < limit:
            out.append(held.popleft())
        return out
