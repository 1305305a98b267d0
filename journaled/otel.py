"""OpenTelemetry tracing across the queue: a request followed from its put to its processing.

Switched on as OpenTelemetry's own instrumentations are, and off until then::

    from journaled.otel import JournaledInstrumentor
    JournaledInstrumentor().instrument()            # or instrument(tracer_provider=...)

Needs the ``otel`` extra (``opentelemetry-api``); an SDK and an exporter are the application's
choice, as for every instrumentation.  What it does, by the OpenTelemetry messaging conventions:

* **Producer.**  A ``put``/``put_many`` made while a span is current (in the owner or in a client
  process) gets a ``send <queue>`` span (kind PRODUCER) and carries that span's context in the
  item's headers, through the global propagator (W3C ``traceparent``/``tracestate``, and
  ``baggage`` when configured).  Headers the caller gave are kept: a ``traceparent`` of its own
  wins.  A put made outside any span is left exactly as it is (no span, no header: a plain put
  stays a plain PUT record).
* **Consumer.**  ``get``/``aget`` (and ``get_many``, and every form built on them) record a
  ``receive <queue>`` span (kind CONSUMER) in the trace of the item's put; ``process``/``aprocess``
  and ``transaction``/``atransaction`` run the consumer's code for an item inside a
  ``process <queue>`` span (kind CONSUMER, a child of the put's span), current while that code
  runs, so its own spans nest under it; an exception escaping it is recorded on the span.
  For a plain ``get``, :func:`context_of` gives the put's context for the caller to continue.
* **Attributes**: ``messaging.system`` = ``"journaled"``, ``messaging.destination.name`` (the
  queue's name), ``messaging.operation.type`` (``send``, ``receive``, ``process``) and
  ``messaging.operation.name`` (``put``, ``put_many``, ``get``, ``get_many``, ``process``,
  ``transaction``), ``messaging.consumer.group.name`` (the reader: a reader is a consumer group of
  its own), ``messaging.message.id`` (the item id), ``messaging.batch.message_count`` for the
  batch forms, and ``messaging.journaled.message.delivery_count`` (1 + the item's error count).

Nothing is added to the put or get path unless :meth:`JournaledInstrumentor.instrument` was
called: it wraps the public methods of the owner's and a client's queue and reader classes, and
:meth:`~JournaledInstrumentor.uninstrument` puts the originals back.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from journaled.item import Item

__all__ = ["JournaledInstrumentor", "context_of"]

SYSTEM = "journaled"
_SCOPE = "journaled.otel"
#: context keys set while a wrapped put or get runs its original: a put or get that one makes
#: inside (a client's put through put_many) is not a second operation of the caller's
_SENDING = otel_context.create_key("journaled-sending")
_RECEIVING = otel_context.create_key("journaled-receiving")


def _inside(key: str, call: Callable[[], Any]) -> Any:
    token = otel_context.attach(otel_context.set_value(key, True))
    try:
        return call()
    finally:
        otel_context.detach(token)


async def _ainside(key: str, call: Callable[[], Awaitable[Any]]) -> Any:
    token = otel_context.attach(otel_context.set_value(key, True))
    try:
        return await call()
    finally:
        otel_context.detach(token)


class _HeaderGetter(Getter[Mapping[str, bytes]]):
    """Reads a propagator's fields from an item's headers (str -> bytes)."""

    def get(self, carrier: Mapping[str, bytes], key: str) -> list[str] | None:
        value = carrier.get(key)
        return None if value is None else [bytes(value).decode("ascii", "replace")]

    def keys(self, carrier: Mapping[str, bytes]) -> list[str]:
        return list(carrier)


_GETTER = _HeaderGetter()


def context_of(item: Item) -> otel_context.Context:
    """The trace context the item was put in (empty when it carries none): continue its trace
    with ``tracer.start_as_current_span(..., context=context_of(item))``."""
    return propagate.extract(item.headers, getter=_GETTER)


def _with_trace(headers: Mapping[str, bytes] | None) -> Mapping[str, bytes]:
    """``headers`` with the current context's propagation fields added (the caller's win)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    merged = dict(headers or {})
    for name, value in carrier.items():
        merged.setdefault(name, value.encode("ascii", "replace"))
    return merged


def _queue_name(reader: Any) -> str:
    queue = getattr(reader, "queue", None)  # a client's reader knows its queue
    if queue is not None:
        return str(queue.name)
    return str(reader.core.journal.name)


def _delivery_attrs(reader: Any, item: Item, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": _queue_name(reader),
        "messaging.consumer.group.name": str(reader.name),
        "messaging.message.id": str(item.id),
        "messaging.journaled.message.delivery_count": item.error_count + 1,
        "messaging.operation.name": operation,
    }


class _Tracing:
    """The wrappers, bound to one tracer."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    # ------------------------------------------------------------------ producer
    def _sending(self, original: Callable[..., Any], operation: str) -> Callable[..., Any]:
        """``put`` or ``put_many`` (``operation``) in a ``send`` span whose context the items'
        headers carry, when a span is current; else the original call, untouched."""
        tracer = self.tracer

        @functools.wraps(original)
        def send(
            queue: Any, what: Any, *args: Any, headers: Mapping[str, bytes] | None = None, **kw: Any
        ) -> Any:
            if otel_context.get_value(_SENDING) or not trace.get_current_span().get_span_context().is_valid:
                return original(queue, what, *args, headers=headers, **kw)
            attrs = {
                "messaging.system": SYSTEM,
                "messaging.destination.name": str(queue.name),
                "messaging.operation.type": "send",
                "messaging.operation.name": operation,
            }
            with tracer.start_as_current_span(
                f"send {queue.name}", kind=SpanKind.PRODUCER, attributes=attrs
            ) as span:
                got = _inside(
                    _SENDING, lambda: original(queue, what, *args, headers=_with_trace(headers), **kw)
                )
                if isinstance(got, list):
                    span.set_attribute("messaging.batch.message_count", len(got))
                else:
                    span.set_attribute("messaging.message.id", str(got))
                return got

        return send

    def put(self, original: Callable[..., int]) -> Callable[..., int]:
        return self._sending(original, "put")

    def put_many(self, original: Callable[..., list[int]]) -> Callable[..., list[int]]:
        return self._sending(original, "put_many")

    # ------------------------------------------------------------------ consumer
    def received(self, reader: Any, item: Item, operation: str) -> None:
        """A ``receive`` span in the trace of the item's put, ended at once."""
        attrs = _delivery_attrs(reader, item, operation)
        attrs["messaging.operation.type"] = "receive"
        span = self.tracer.start_span(
            f"receive {attrs['messaging.destination.name']}",
            context=context_of(item),
            kind=SpanKind.CONSUMER,
            attributes=attrs,
        )
        span.end()

    def process_span(self, reader: Any, item: Item, operation: str) -> Span:
        attrs = _delivery_attrs(reader, item, operation)
        attrs["messaging.operation.type"] = "process"
        return self.tracer.start_span(
            f"process {attrs['messaging.destination.name']}",
            context=context_of(item),
            kind=SpanKind.CONSUMER,
            attributes=attrs,
        )

    def get(self, original: Callable[..., Item]) -> Callable[..., Item]:
        @functools.wraps(original)
        def get(reader: Any, *args: Any, **kw: Any) -> Item:
            if otel_context.get_value(_RECEIVING):
                return original(reader, *args, **kw)
            item: Item = _inside(_RECEIVING, lambda: original(reader, *args, **kw))
            self.received(reader, item, "get")
            return item

        return get

    def aget(self, original: Callable[..., Awaitable[Item]]) -> Callable[..., Awaitable[Item]]:
        @functools.wraps(original)
        async def aget(reader: Any, *args: Any, **kw: Any) -> Item:
            if otel_context.get_value(_RECEIVING):
                return await original(reader, *args, **kw)
            item: Item = await _ainside(_RECEIVING, lambda: original(reader, *args, **kw))
            self.received(reader, item, "get")
            return item

        return aget

    def get_many(self, original: Callable[..., list[Item]]) -> Callable[..., list[Item]]:
        tracer = self.tracer

        @functools.wraps(original)
        def get_many(reader: Any, *args: Any, **kw: Any) -> list[Item]:
            if otel_context.get_value(_RECEIVING):
                return original(reader, *args, **kw)
            items: list[Item] = _inside(_RECEIVING, lambda: original(reader, *args, **kw))
            links = [Link(trace.get_current_span(context_of(it)).get_span_context()) for it in items]
            name = _queue_name(reader)
            attrs: dict[str, str | int] = {
                "messaging.system": SYSTEM,
                "messaging.destination.name": name,
                "messaging.consumer.group.name": str(reader.name),
                "messaging.operation.type": "receive",
                "messaging.operation.name": "get_many",
                "messaging.batch.message_count": len(items),
            }
            valid = [link for link in links if link.context.is_valid]
            tracer.start_span(f"receive {name}", kind=SpanKind.CONSUMER, attributes=attrs, links=valid).end()
            return items

        return get_many

    def process(self, original: Callable[..., int]) -> Callable[..., int]:
        tracing = self

        @functools.wraps(original)
        def process(reader: Any, fn: Callable[[Item], object], *args: Any, **kw: Any) -> int:
            @functools.wraps(fn)
            def traced(item: Item) -> object:
                with _current(tracing.process_span(reader, item, "process")):
                    return fn(item)

            return original(reader, traced, *args, **kw)

        return process

    def aprocess(self, original: Callable[..., Awaitable[int]]) -> Callable[..., Awaitable[int]]:
        tracing = self

        @functools.wraps(original)
        async def aprocess(reader: Any, fn: Callable[[Item], object], *args: Any, **kw: Any) -> int:
            async def traced(item: Item) -> object:
                with _current(tracing.process_span(reader, item, "process")):
                    result = fn(item)
                    if inspect.isawaitable(result):
                        result = await result
                    return result

            return await original(reader, traced, *args, **kw)

        return aprocess

    def transaction(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``transaction`` and ``atransaction``: the context they return, its block traced."""
        tracing = self

        @functools.wraps(original)
        def transaction(reader: Any, *args: Any, **kw: Any) -> _TracedTransaction:
            return _TracedTransaction(tracing, reader, original(reader, *args, **kw))

        return transaction

    atransaction = transaction


class _current:
    """Make ``span`` current for a block, record an exception escaping it, end it."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self.token: object = None

    def __enter__(self) -> Span:
        self.token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc is not None:
                self.span.record_exception(exc)
                self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            self.span.end()
        finally:
            otel_context.detach(self.token)  # type: ignore[arg-type]


class _TracedTransaction:
    """A transaction context (``with`` or ``async with``, as the one it wraps) whose block runs
    inside a ``process`` span."""

    def __init__(self, tracing: _Tracing, reader: Any, inner: Any) -> None:
        self._tracing, self._reader, self._inner = tracing, reader, inner
        self._span: _current | None = None

    def __getattr__(self, name: str) -> Any:  # item, lost: as the transaction has them
        return getattr(self._inner, name)

    def _begin(self, item: Item) -> Item:
        self._span = _current(self._tracing.process_span(self._reader, item, "transaction"))
        self._span.__enter__()
        return item

    def _end(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._span is not None:
            self._span.__exit__(exc_type, exc, tb)

    def __enter__(self) -> Item:
        return self._begin(self._inner.__enter__())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Any:
        try:
            self._end(exc_type, exc, tb)
        finally:
            return self._inner.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Item:
        return self._begin(await self._inner.__aenter__())

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Any:
        try:
            self._end(exc_type, exc, tb)
        finally:
            return await self._inner.__aexit__(exc_type, exc, tb)


def _targets() -> list[tuple[type, str, str]]:
    """(class, method, wrapper) of everything instrumented: the owner's and a client's queue
    and reader."""
    from journaled.queue import JournaledQueue
    from journaled.reader import Reader
    from journaled.remote.clientqueue import RemoteQueue
    from journaled.remote.clientreader import RemoteReader

    out: list[tuple[type, str, str]] = []
    queues: list[type] = [JournaledQueue, RemoteQueue]
    for cls in queues:
        out += [(cls, "put", "put"), (cls, "put_many", "put_many")]
    readers: list[type] = [Reader, RemoteReader]
    for cls in readers:
        for method in ("get", "aget", "get_many", "process", "aprocess", "transaction", "atransaction"):
            out.append((cls, method, method))
    return out


class JournaledInstrumentor:
    """Switches tracing on (:meth:`instrument`) and off (:meth:`uninstrument`) for the whole
    process, as OpenTelemetry's instrumentors do.  One instance is as good as another: the state
    is the process's."""

    #: (class, method) -> the class's own attribute before, or None when it was inherited
    _originals: dict[tuple[type, str], Any] = {}

    @property
    def is_instrumented(self) -> bool:
        """Whether tracing is on in this process."""
        return bool(JournaledInstrumentor._originals)

    def instrument(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        """Trace puts and deliveries from now on, with ``tracer_provider`` (default: the global
        one).  Calling it again while on changes nothing."""
        if self.is_instrumented:
            return
        tracing = _Tracing(trace.get_tracer(_SCOPE, tracer_provider=tracer_provider))
        for cls, method, wrapper in _targets():
            current = getattr(cls, method, None)
            if current is None or getattr(current, "_journaled_otel", False):
                continue  # inherited from a class wrapped already
            traced = getattr(tracing, wrapper)(current)
            traced._journaled_otel = True
            JournaledInstrumentor._originals[(cls, method)] = cls.__dict__.get(method)
            setattr(cls, method, traced)

    def uninstrument(self) -> None:
        """Put the original methods back: nothing traced from now on."""
        for (cls, method), original in JournaledInstrumentor._originals.items():
            if original is None:
                delattr(cls, method)  # it was inherited: inherit it again
            else:
                setattr(cls, method, original)
        JournaledInstrumentor._originals.clear()
