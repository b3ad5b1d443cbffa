"""Serve the button page, and forward its ``/v1`` requests to onejob with the API key.

    python examples/button/serve.py --gateway http://127.0.0.1:8000 --key "$KEY" --port 8080

then open http://127.0.0.1:8080/. This is the page's own server, the part a real
application already has: the browser never holds the onejob API key (the server adds
``Authorization``), and the page calls its own origin, so no CORS is needed (onejob sends
no CORS headers). It forwards the page's ``Idempotency-Key`` untouched, and streams
``text/event-stream`` answers as they come. Python standard library and httpx only.
"""

from __future__ import annotations

import argparse
import mimetypes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
CLIENT = HERE.parents[1] / "clients/js/src"
#: Headers that belong to one connection, never forwarded (RFC 9110 7.6.1), and those the
#: forwarder sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
    }
)
EVENT_STREAM = "text/event-stream"
CONNECT_TIMEOUT = 5.0  # seconds to reach the gateway
READ_TIMEOUT = 120.0  # seconds a forwarded request may wait for bytes (Prefer: wait is 60)


class ButtonServer(ThreadingHTTPServer):
    """The page's files, and ``/v1/*`` forwarded to the gateway."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        gateway: str,
        api_key: str | None,
        handler: type[BaseHTTPRequestHandler] | None = None,
    ) -> None:
        super().__init__(address, handler or Forwarder)
        self.gateway = gateway.rstrip("/")
        self.api_key = api_key
        self.http = httpx.Client(timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT))

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def server_close(self) -> None:
        super().server_close()
        self.http.close()


def static_file(path: str) -> Path | None:
    """Return the file a page path names: the page's own, or the JS client's modules."""
    if path in ("/", "/index.html"):
        return HERE / "index.html"
    if path.startswith("/onejob-client/"):
        base, name = CLIENT, path.removeprefix("/onejob-client/")
    else:
        base, name = HERE, path.lstrip("/")
    if "/" in name or name.startswith(".") or not name.endswith((".js", ".css", ".html")):
        return None
    candidate = base / name
    return candidate if candidate.is_file() else None


class Forwarder(BaseHTTPRequestHandler):
    """Answer one request: a file, or the gateway's answer."""

    server: ButtonServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.startswith("/v1/"):
            self.forward()
        else:
            self.send_file()

    def do_POST(self) -> None:
        if self.path.startswith("/v1/"):
            self.forward()
        else:
            self.send_plain(404, "not found")

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests and terminals have enough to read."""

    def send_plain(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_file(self) -> None:
        path = static_file(self.path.split("?", 1)[0])
        if path is None:
            self.send_plain(404, "not found")
            return
        data = path.read_bytes()
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if kind == "text/javascript" or path.suffix == ".js":
            kind = "text/javascript"
        self.send_response(200)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def forward(self, body: bytes | None = None) -> int:
        """Send the request on to the gateway and its answer back; return the status."""
        try:
            response = self.upstream(self.read_body() if body is None else body)
        except httpx.TransportError as exc:
            self.send_plain(502, f"the gateway did not answer: {type(exc).__name__}")
            return 502
        try:
            self.relay(response)
        finally:
            response.close()
        return response.status_code

    def upstream(self, body: bytes) -> httpx.Response:
        """Send this request to the gateway, with the API key; return its streamed answer."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if self.server.api_key:
            headers["Authorization"] = f"Bearer {self.server.api_key}"
        request = self.server.http.build_request(
            self.command, self.server.gateway + self.path, headers=headers, content=body
        )
        return self.server.http.send(request, stream=True)

    def relay(self, response: httpx.Response) -> None:
        """Write the gateway's answer: whole, or chunk by chunk for an event stream."""
        streaming = response.headers.get("content-type", "").startswith(EVENT_STREAM)
        data = b"" if streaming else response.read()
        self.send_response(response.status_code)
        for name, value in response.headers.multi_items():
            if name.lower() not in HOP_BY_HOP and name.lower() not in ("date", "server"):
                self.send_header(name, value)
        if streaming:
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            for chunk in response.iter_bytes():
                self.wfile.write(chunk)
                self.wfile.flush()
        else:
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateway", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="an onejob API key (onejob keys create)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    server = ButtonServer((args.host, args.port), args.gateway, args.key)
    print(f"the button page: {server.url}/ (forwarding /v1 to {args.gateway})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
