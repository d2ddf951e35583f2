"""A small caching HTTP proxy for Debian packages, listening on loopback only.

The lab's VMs reach it through qemu user networking (restrict=on, guestfwd to
127.0.0.1), so it is the only way packages get into them.  It forwards plain
HTTP GET/HEAD requests for an allow-list of Debian mirror hosts, keeps the
immutable files (``/pool/...`` packages and ``by-hash`` indices) in a cache
directory shared by all lab runs, and passes the rest (Release, InRelease,
Packages) through.

    python3 aptproxy.py --port 3142 --cache DIR [--allow HOST ...] [--pidfile FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import http.server
import os
import shutil
import sys
import tempfile
import urllib.parse
from pathlib import Path

DEFAULT_ALLOW = ("deb.debian.org", "security.debian.org")
PASS_HEADERS = ("If-Modified-Since", "If-None-Match", "Range", "If-Range", "Cache-Control")
KEEP_HEADERS = (
    "Content-Type",
    "Content-Length",
    "Last-Modified",
    "ETag",
    "Content-Range",
    "Accept-Ranges",
)


def is_immutable(path: str) -> bool:
    return path.endswith((".deb", ".udeb", ".dsc")) or "/by-hash/" in path


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "junkyard-lab-aptproxy/1"
    cache_dir: Path
    allow: tuple[str, ...]

    def log_message(self, format: str, *args) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def do_GET(self) -> None:
        self.handle_request(head=False)

    def do_HEAD(self) -> None:
        self.handle_request(head=True)

    def refuse(self, code: int, why: str) -> None:
        body = (why + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_request(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.scheme != "http" or not url.hostname:
            self.refuse(400, "absolute http:// URLs only (this is a proxy)")
            return
        if url.hostname not in self.allow:
            self.refuse(403, f"host {url.hostname} is not a Debian mirror this lab allows")
            return
        path = url.path or "/"
        cached = self.cache_path(url.hostname, path)
        if is_immutable(path) and cached.is_file():
            self.send_file(cached, head)
            return
        upstream = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
        try:
            headers = {h: self.headers[h] for h in PASS_HEADERS if self.headers.get(h)}
            target = path + (f"?{url.query}" if url.query else "")
            upstream.request("HEAD" if head else "GET", target, headers=headers)
            resp = upstream.getresponse()
            self.send_response(resp.status, resp.reason)
            for name in KEEP_HEADERS:
                value = resp.getheader(name)
                if value is not None:
                    self.send_header(name, value)
            length = resp.getheader("Content-Length")
            if length is None and not head:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if head:
                return
            store = resp.status == 200 and is_immutable(path) and length is not None
            self.copy_body(resp, cached if store else None, int(length) if length else None)
        except OSError as exc:
            self.log_message("upstream %s failed: %s", url.hostname, exc)
            self.close_connection = True
        finally:
            upstream.close()

    def copy_body(self, resp, cached: Path | None, length: int | None) -> None:
        tmp = None
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=cached.parent, prefix=".part-")
            tmp = (os.fdopen(fd, "wb"), name)
        done = 0
        try:
            while True:
                chunk = resp.read(65536)
                if not chunk:
                    break
                done += len(chunk)
                self.wfile.write(chunk)
                if tmp:
                    tmp[0].write(chunk)
        finally:
            if tmp:
                tmp[0].close()
                if length is not None and done == length:
                    os.replace(tmp[1], cached)
                else:
                    os.unlink(tmp[1])

    def send_file(self, cached: Path, head: bool) -> None:
        size = cached.stat().st_size
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if not head:
            with cached.open("rb") as f:
                shutil.copyfileobj(f, self.wfile, 65536)

    def cache_path(self, host: str, path: str) -> Path:
        clean = os.path.normpath("/" + urllib.parse.unquote(path)).lstrip("/")
        if not clean or clean.startswith(".."):
            clean = hashlib.sha256(path.encode()).hexdigest()
        return self.cache_dir / host / clean


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=3142)
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--allow", action="append", default=[])
    ap.add_argument("--pidfile", type=Path)
    args = ap.parse_args(argv)
    if args.pidfile:
        args.pidfile.write_text(f"{os.getpid()}\n")
    Handler.cache_dir = args.cache
    Handler.allow = tuple(args.allow) or DEFAULT_ALLOW
    args.cache.mkdir(parents=True, exist_ok=True)
    server = Server(("127.0.0.1", args.port), Handler)
    print(f"aptproxy listening on 127.0.0.1:{args.port}, cache {args.cache}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
