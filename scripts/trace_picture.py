#!/usr/bin/env python3
"""Draw one request's trace across the queue (docs/img/trace.png, shown in docs/tracing.md).

Two processes, as in the job-queue recipe: this one owns a queue and, inside a "handle request"
span, puts a job; a worker process, a client of this owner, takes it with ``reader.process`` and
does its work in a "resize image" span.  Each process records its spans with the OpenTelemetry
SDK's in-memory exporter; the worker prints its own as JSON, and this script draws both on one
time line, one row per span, indented by depth.  Needs the ``otel`` and ``bench`` extras
(opentelemetry-sdk, matplotlib).

    python scripts/trace_picture.py [--out docs/img/trace.png]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time

WORKER = """
import json, sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from journaled import JournaledQueue
from journaled.otel import JournaledInstrumentor

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
JournaledInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer("worker")
with JournaledQueue(sys.argv[1]) as q:
    def work(item):
        with tracer.start_as_current_span("resize image"):
            time.sleep(0.02)
    q.reader("workers").process(work, timeout=2.0)
print(json.dumps([span_json(s) for s in exporter.get_finished_spans()]))
"""

SPAN_JSON = """
def span_json(s):
    return {"name": s.name, "process": PROCESS, "start": s.start_time, "end": s.end_time,
            "id": s.context.span_id, "parent": s.parent.span_id if s.parent else None,
            "trace": s.context.trace_id, "kind": s.kind.name}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/img/trace.png", help="where to write the PNG")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from journaled import JournaledQueue, QueueConfig
    from journaled.otel import JournaledInstrumentor

    namespace: dict[str, object] = {"PROCESS": "web (owner)"}
    exec(SPAN_JSON, namespace)
    span_json = namespace["span_json"]

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    JournaledInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("web")
    path = tempfile.mkdtemp() + "/jobs"
    with JournaledQueue(path, QueueConfig(sync="always"), name="jobs") as q:
        q.reader("workers")
        worker_code = "PROCESS = 'worker (client)'\n" + SPAN_JSON + textwrap.dedent(WORKER)
        worker = subprocess.Popen(
            [sys.executable, "-c", worker_code, path], stdout=subprocess.PIPE, text=True
        )
        time.sleep(0.5)  # the worker connects and waits
        with tracer.start_as_current_span("handle request"):
            time.sleep(0.01)
            q.put(b'{"image": 42}')
            time.sleep(0.01)
        out, _ = worker.communicate(timeout=60)
    spans = [span_json(s) for s in exporter.get_finished_spans()] + json.loads(out)  # type: ignore[operator]
    trace_ids = {s["trace"] for s in spans if s["name"] == "handle request"}
    spans = sorted((s for s in spans if s["trace"] in trace_ids), key=lambda s: s["start"])
    by_id = {s["id"]: s for s in spans}

    def depth(s: dict) -> int:
        return 0 if s["parent"] not in by_id else 1 + depth(by_id[s["parent"]])

    t0 = spans[0]["start"]
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(spans) + 1.2))
    colors = {"web (owner)": "#4C72B0", "worker (client)": "#DD8452"}
    for row, s in enumerate(spans):
        start, width = (s["start"] - t0) / 1e6, max((s["end"] - s["start"]) / 1e6, 0.3)
        ax.barh(row, width, left=start, color=colors[s["process"]], height=0.6)
        label = "  " * depth(s) + f"{s['name']}  [{s['kind'].lower()}, {s['process']}]"
        ax.text(start + width + 1, row, label, va="center", fontsize=9)
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds since the request began")
    ax.set_xlim(0, (max(s["end"] for s in spans) - t0) / 1e6 * 1.9)
    ax.set_title(f"one trace ({len(spans)} spans, 2 processes): put in a request, processed by a worker")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: {len(spans)} spans in trace {next(iter(trace_ids)):032x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
