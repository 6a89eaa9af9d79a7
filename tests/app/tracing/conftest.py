from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rocksidecar.app.tracing import spans


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Spans on, each one in this in-memory exporter as soon as it ends."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    spans.configure(provider)
    try:
        yield memory
    finally:
        spans.configure(None)
