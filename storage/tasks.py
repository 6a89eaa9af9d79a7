"""Stopping a background task: the one way the stores' and the retry and delay loops end on close."""

from __future__ import annotations

import asyncio
from typing import Any


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing runs) and wait until it has ended, whatever it raised, so a close
    returns only once the loop can no longer touch what is being closed."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
