"""Tracing across the queue (journaled.otel): a put made inside a span carries its trace context in
the item's headers, and every way of consuming it continues that trace -- in one process and
across two (an owner and its client), checked with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from journaled import Empty, JournaledQueue, QueueConfig
from journaled.otel import JournaledInstrumentor, context_of
from journaled.queue import JournaledQueue as OwnerQueue
from tests.support.child import Child

QUIET = QueueConfig(sync="never")


@pytest.fixture
def spans():
    """Tracing on with an in-memory exporter; off again after the test."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    JournaledInstrumentor().instrument(tracer_provider=provider)
    try:
        yield provider.get_tracer("test"), exporter
    finally:
        JournaledInstrumentor().uninstrument()


def by_name(exporter: InMemorySpanExporter) -> dict[str, list]:
    out: dict[str, list] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def test_a_put_inside_a_span_carries_its_context_and_a_get_continues_the_trace(tmp_path, spans):
    tracer, exporter = spans
    with JournaledQueue(str(tmp_path / "jobs"), QUIET) as q:
        r = q.reader("workers")
        with tracer.start_as_current_span("request") as request:
            item_id = q.put(b"job", headers={"tenant": b"a"})
        item = r.get(timeout=1)
        r.commit(item)
    assert item.headers["tenant"] == b"a" and b"traceparent" not in item.headers
    assert item.headers["traceparent"].decode().split("-")[1] == f"{request.get_span_context().trace_id:032x}"
    named = by_name(exporter)
    [send] = named["send jobs"]
    [receive] = named["receive jobs"]
    assert send.kind == SpanKind.PRODUCER and send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes) == {
        "messaging.system": "journaled",
        "messaging.destination.name": "jobs",
        "messaging.operation.type": "send",
        "messaging.operation.name": "put",
        "messaging.message.id": str(item_id),
    }
    assert receive.kind == SpanKind.CONSUMER
    assert (
        receive.context.trace_id == send.context.trace_id and receive.parent.span_id == send.context.span_id
    )
    assert receive.attributes["messaging.consumer.group.name"] == "workers"
    assert receive.attributes["messaging.message.id"] == str(item_id)
    assert receive.attributes["messaging.journaled.message.delivery_count"] == 1
    assert context_of(item) is not None


def test_a_put_outside_any_span_is_left_as_it_is(tmp_path, spans):
    _, exporter = spans
    with JournaledQueue(str(tmp_path / "q"), QUIET) as q:
        r = q.reader("r")
        q.put(b"plain")
        q.put_many([b"a", b"b"])
        assert [dict(r.get(timeout=1).headers) for _ in range(3)] == [{}, {}, {}]
    assert [s.name for s in exporter.get_finished_spans()] == ["receive q"] * 3  # nothing to continue
    assert all(not s.parent for s in exporter.get_finished_spans())


def test_process_runs_the_consumers_code_inside_a_process_span_of_the_puts_trace(tmp_path, spans):
    tracer, exporter = spans
    seen = []

    def work(item):
        with tracer.start_as_current_span("work") as inner:
            seen.append(inner.get_span_context().trace_id)
        if item.data == b"bad" and item.error_count == 0:
            raise RuntimeError("try again")

    with JournaledQueue(str(tmp_path / "q"), QUIET) as q:
        r = q.reader("r")
        with tracer.start_as_current_span("request"):
            q.put_many([b"good", b"bad"])
        assert r.process(work, timeout=0.3) == 2
    named = by_name(exporter)
    [send] = named["send q"]
    assert send.attributes["messaging.batch.message_count"] == 2
    process = named["process q"]
    assert len(process) == 3  # good, bad, bad again
    assert all(p.parent.span_id == send.context.span_id for p in process)
    assert [p.attributes["messaging.journaled.message.delivery_count"] for p in process] == [1, 1, 2]
    failed = [p for p in process if p.status.status_code == StatusCode.ERROR]
    assert len(failed) == 1 and failed[0].events[0].name == "exception"
    works = named["work"]
    assert {w.parent.span_id for w in works} == {p.context.span_id for p in process}
    assert set(seen) == {send.context.trace_id}


def test_a_transaction_block_runs_inside_a_process_span(tmp_path, spans):
    tracer, exporter = spans
    with JournaledQueue(str(tmp_path / "q"), QUIET) as q:
        r = q.reader("r")
        with tracer.start_as_current_span("request"):
            q.put(b"x")
        with r.transaction(timeout=1) as item:
            current = trace.get_current_span()
            assert current.get_span_context().trace_id == int(item.headers["traceparent"].split(b"-")[1], 16)
        with pytest.raises(Empty):
            r.get(block=False)  # committed by the block
    [process] = by_name(exporter)["process q"]
    assert process.attributes["messaging.operation.name"] == "transaction"


def test_the_asyncio_forms_continue_the_trace(tmp_path, spans):
    tracer, exporter = spans

    async def main(q):
        r = q.reader("r")
        item = await r.aget(timeout=1)
        r.commit(item)
        async with r.atransaction(timeout=1) as item:
            assert trace.get_current_span().get_span_context().is_valid

        async def work(item):
            await asyncio.sleep(0)

        return await r.aprocess(work, timeout=0.2)

    with JournaledQueue(str(tmp_path / "q"), QUIET) as q:
        with tracer.start_as_current_span("request"):
            q.put_many([b"1", b"2", b"3"])
        assert asyncio.run(main(q)) == 1
    named = by_name(exporter)
    [send] = named["send q"]
    assert len(named["process q"]) == 2 and len(named["receive q"]) == 3
    assert {s.context.trace_id for s in named["process q"] + named["receive q"]} == {send.context.trace_id}


def test_uninstrument_puts_the_original_methods_back(tmp_path, spans):
    tracer, exporter = spans
    JournaledInstrumentor().uninstrument()
    assert not JournaledInstrumentor().is_instrumented
    assert OwnerQueue.put.__qualname__ == "JournaledQueue.put"
    with JournaledQueue(str(tmp_path / "q"), QUIET) as q:
        with tracer.start_as_current_span("request"):
            q.put(b"x")
        assert dict(q.reader("r", None).get(timeout=1).headers) == {}
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]


CLIENT_PRODUCER = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from journaled import JournaledQueue
from journaled.otel import JournaledInstrumentor

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
JournaledInstrumentor().instrument(tracer_provider=provider)
q = JournaledQueue(sys.argv[1])
assert not q.is_owner, "the test process owns the queue: this one must be its client"
with provider.get_tracer("client").start_as_current_span("request"):
    q.put(b"from the client")
q.close()
[send] = [s for s in exporter.get_finished_spans() if s.name.startswith("send")]
print(json.dumps({"trace": send.context.trace_id, "span": send.context.span_id}), flush=True)
"""


def test_a_client_processes_put_is_continued_by_the_owners_get(tmp_path, spans):
    _, exporter = spans
    with JournaledQueue(str(tmp_path / "q"), QUIET) as q:
        r = q.reader("r")
        child = Child(CLIENT_PRODUCER, str(tmp_path / "q"))
        child.wait_for_line("{")
        assert child.proc.wait(60) == 0
        sent = json.loads(next(x for x in child.lines if x.startswith("{")))
        with r.transaction(timeout=5) as item:
            assert item.data == b"from the client"
    [process] = by_name(exporter)["process q"]
    assert (process.context.trace_id, process.parent.span_id) == (sent["trace"], sent["span"])
