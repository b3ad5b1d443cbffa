"""A loopback OTLP/HTTP receiver: collects ``POST /v1/traces`` and decodes each
``ExportTraceServiceRequest`` with ``opentelemetry-proto``, as a collector would."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

#: ``OTEL_SERVICE_NAME`` of the processes under test.
SERVICE = "onejob-under-test"
KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


@dataclass(frozen=True)
class Span:
    """One received span, decoded."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    start_ns: int
    end_ns: int
    status_code: int


@dataclass
class Receiver:
    """What the receiver collected."""

    url: str
    spans: list[Span] = field(default_factory=list)
    posts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append(
                        Span(
                            name=s.name,
                            kind=KINDS.get(s.kind, str(s.kind)),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            resource=resource,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            status_code=s.status.code,
                        )
                    )
        with self.lock:
            self.posts += 1
            self.spans.extend(spans)

    def in_trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(
        self, predicate: Callable[[list[Span]], bool], timeout: float = 10.0
    ) -> list[Span]:
        """Wait (bounded) until ``predicate(spans)`` holds; return every span received."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                names = [(s.name, s.trace_id[:8]) for s in spans]
                raise AssertionError(f"the spans never arrived; received: {names}")
            time.sleep(0.05)


@contextlib.contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve an OTLP/HTTP receiver on a free loopback port until the block ends."""
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            holder[0].received(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    holder.append(Receiver(f"http://127.0.0.1:{port}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
