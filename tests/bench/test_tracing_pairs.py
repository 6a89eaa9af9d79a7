"""bench.tracing's figures: each row against the tracing-off run of its own pair, on CPU per message of
the sidecar plus the collector, median over the rounds."""

from __future__ import annotations

import pytest

from bench.compare import Measured
from bench.tracing import ANCHOR, OTEL_ON, Run, Sample, _sample


def test_the_collectors_cpu_is_scaled_by_the_same_windows_sidecar_cpu() -> None:
    s = _sample(Measured(rate=5000.0, cpu_per_100k=10.0), sidecar_cpu=2.0, collector_cpu=0.5)
    assert (s.sidecar, s.collector, s.cpu) == (10.0, 2.5, 12.5)
    assert _sample(Measured(rate=1.0, cpu_per_100k=10.0), 0.0, 0.5).collector == 0.0


def test_each_row_is_the_median_of_its_pairs_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    run = Run([ANCHOR, OTEL_ON])
    # the anchor drifts 10 -> 20 -> 15 between rounds; the row stays 1.5x / 2x / 1.2x its own pair's
    for anchor_cpu, factor in ((10.0, 1.5), (20.0, 2.0), (15.0, 1.2)):
        anchor = Sample(rate=1000.0, sidecar=anchor_cpu, collector=0.0)
        run.pair(
            0, OTEL_ON, anchor, Sample(rate=1000.0 / factor, sidecar=anchor_cpu * factor - 1, collector=1.0)
        )
    run.report(None)
    out = capsys.readouterr().out
    cpu_line = out.split("CPU per message (sidecar + collector)")[1].splitlines()[1]
    rate_line = out.split("x32 rate, % of its paired anchor's")[1].splitlines()[1]
    assert OTEL_ON in cpu_line and "150.0 %" in cpu_line  # the median of 1.5, 2.0, 1.2
    assert "66.7 %" in rate_line  # the median of 1/1.5, 1/2, 1/1.2
    assert "10.0-20.0 cpu-s/100k (2.00x)" in out  # the anchors' spread: the run's resolution
