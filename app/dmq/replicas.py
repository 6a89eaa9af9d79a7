"""Which replicas hold a delayed message and which one publishes it (README "Rock-DMQ replicas").

Placement is rendezvous hashing over the configured replica names (the StatefulSet's pod names): every
replica ranks the names by a hash of (message id, name), the same way on every replica, with no
coordination. The first ``copies`` names hold the message; the first of those that is live publishes it.
Live is the broker's member list of the publishers' consumer group (app.dmq.presence), so the broker is
the one arbiter every replica asks; a replica that crashes leaves that list when its connection closes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

MAX_REPLICAS = 64  # names are listed in a flag; more is not a deployment this design is for
_SCORE = itemgetter(0)


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    """A name's score for an id is the 8-byte blake2b of ``name NUL id`` (UTF-8); the highest ranks first,
    ties in the listed order. Stores on disk hold what this ranking gave them: it must never change."""

    names: tuple[str, ...]  # every replica's instance name
    me: str  # this replica's
    copies: int  # how many replicas hold each message
    # each name with a blake2b that has hashed ``name NUL``: a copy of it hashes an id (half the cost of
    # hashing both; holders runs at intake, at each mark and at each pick, on every replica)
    _hashers: tuple[tuple[str, Any], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.names or len(self.names) > MAX_REPLICAS:
            raise ValueError(f"replicas: 1 to {MAX_REPLICAS} names, got {len(self.names)}")
        if len(set(self.names)) != len(self.names):
            raise ValueError("replicas: a name is listed twice")
        if self.me not in self.names:
            raise ValueError(f"replicas: this replica's instance name {self.me!r} is not listed")
        if not 1 <= self.copies <= len(self.names):
            raise ValueError(
                f"copies must be 1 to {len(self.names)} (the replicas listed), got {self.copies}"
            )
        hashers = tuple((n, hashlib.blake2b(f"{n}\x00".encode(), digest_size=8)) for n in self.names)
        object.__setattr__(self, "_hashers", hashers)

    @classmethod
    def parse(cls, names: str, me: str, copies: int | None) -> ReplicaSet:
        """From the comma-separated list of a flag; ``copies`` None: 2, or 1 for a single replica."""
        listed = tuple(n.strip() for n in names.split(",") if n.strip())
        return cls(listed, me, copies if copies is not None else min(2, len(listed)))

    def holders(self, id_: str) -> Sequence[str]:
        """The replicas that keep ``id_``, in the order they take turns publishing it."""
        raw = id_.encode()
        scored = []
        for name, prefix in self._hashers:
            h = prefix.copy()
            h.update(raw)
            scored.append((h.digest(), name))
        scored.sort(key=_SCORE, reverse=True)  # stable: equal scores keep the listed order
        return [name for _, name in scored[: self.copies]]

    def holds(self, id_: str) -> bool:
        return self.copies == len(self.names) or self.me in self.holders(id_)

    def publisher(self, id_: str, live: Collection[str]) -> str | None:
        """The first live holder of ``id_``; None when none of them is live."""
        return next((n for n in self.holders(id_) if n in live), None)
