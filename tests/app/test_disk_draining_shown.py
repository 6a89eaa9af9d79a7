"""Issue 11 leftover: the disk-full drain mode (the disk reserve given up) shows in the admin stats, on
/ui and as the rocksidecar_disk_draining gauge, not only in /readyz; and all of them clear once there is
room again. The full-disk run itself is tests/app/test_disk_reserve.py (tmpfs); here the reserve's free
space is injected so that the views are checked on any machine."""

from __future__ import annotations

from pathlib import Path

from rocksidecar.app.service import DRAIN_CFS
from rocksidecar.storage.reserve import MIB, DiskReserve, ReserveFile
from tests.app.conftest import Stack

REASON = "IO error: No space left on device: While appending to file: 000042.log"


def _gauge(metrics_text: str) -> float:
    (line,) = [ln for ln in metrics_text.splitlines() if ln.startswith("rocksidecar_disk_draining ")]
    return float(line.split()[1])


async def test_drain_mode_shows_in_admin_ui_and_metrics(stack: Stack, tmp_path: Path) -> None:
    free = [2 * MIB]
    reserve = DiskReserve(
        ReserveFile(tmp_path / "reserve", MIB), DRAIN_CFS, free=lambda: free[0], check_every_s=0.0
    )
    stack.service.disk_reserve = reserve
    reserve.check()  # creates the reserve file: there is room for it
    assert reserve.reserve.exists()

    async def views() -> tuple[dict[str, object], str, float]:
        stats = (await stack.http.get("/v1/admin/stats")).json()["disk"]
        ui = (await stack.http.get("/ui")).text
        return stats, ui, _gauge((await stack.http.get("/metrics")).text)

    stats, ui, gauge = await views()
    assert stats == {"draining": False, "reason": None} and gauge == 0.0
    assert 'data-k="disk-draining">ok<' in ui

    free[0] = 0
    reserve.enter(REASON)  # what a write failing with ENOSPC does: the reserve is released
    stats, ui, gauge = await views()
    assert stats == {"draining": True, "reason": REASON} and gauge == 1.0
    assert 'data-k="disk-draining">full, draining: IO error: No space left on device' in ui
    assert (await stack.http.get("/readyz")).status_code == 503

    free[0] = 2 * MIB  # room for the reserve and as much again: drain mode ends
    stats, ui, gauge = await views()
    assert stats == {"draining": False, "reason": None} and gauge == 0.0
    assert 'data-k="disk-draining">ok<' in ui
