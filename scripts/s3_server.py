#!/usr/bin/env python3
"""An S3-compatible server on 127.0.0.1 for the test suite: moto's S3 backend,
with every request handled under one lock.

moto checks `If-None-Match: *` and then stores the object as two steps; under
its threaded server two racing create-only puts can both pass the check. The
lock makes each request atomic, as S3's conditional writes are, so the commit
race tests exercise our protocol and not the server's race. Connections are
still accepted concurrently.

Usage: s3_server.py [--port 9000] [--bucket NAME]... [--log FILE]
                    [--exit-on-stdin-eof] [--ignore-conditional-writes]
Prints `ready http://127.0.0.1:PORT` once the buckets exist (port 0 picks a
free one). With --log, one line per request (`METHOD PATH?QUERY ACCESS_KEY_ID`) is
appended, so a test can prove that a process (signing with its own key) sent
no write. --exit-on-stdin-eof stops the
server when its parent (a test binary) exits. --ignore-conditional-writes drops
`If-None-Match` headers: a server without conditional writes, on which
omnigraph must refuse to write.
"""

import argparse
import os
import sys
import threading
import urllib.request

from moto.moto_server.werkzeug_app import create_backend_app
from werkzeug.serving import WSGIRequestHandler, make_server


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--bucket", action="append", default=[])
    ap.add_argument("--log")
    ap.add_argument("--exit-on-stdin-eof", action="store_true")
    ap.add_argument("--ignore-conditional-writes", action="store_true")
    args = ap.parse_args()

    app = create_backend_app("s3")
    lock = threading.Lock()
    log = open(args.log, "a", buffering=1) if args.log else None

    def locked(environ, start_response):
        with lock:
            if log is not None:
                auth = environ.get("HTTP_AUTHORIZATION", "")
                key = auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else "-"
                path = environ.get("PATH_INFO", "")
                if environ.get("QUERY_STRING"):
                    path += "?" + environ["QUERY_STRING"]
                log.write(f"{environ.get('REQUEST_METHOD')} {path} {key}\n")
            if args.ignore_conditional_writes:
                environ.pop("HTTP_IF_NONE_MATCH", None)
            # Materialise the body inside the lock: the response is built lazily.
            return list(app(environ, start_response))

    class Quiet(WSGIRequestHandler):
        def log_request(self, *a, **k):
            pass

    server = make_server("127.0.0.1", args.port, locked, threaded=True, request_handler=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    for bucket in args.bucket or ["omnigraph-test"]:
        req = urllib.request.Request(f"{base}/{bucket}", method="PUT")
        urllib.request.urlopen(req).read()
    print(f"ready {base}", flush=True)
    try:
        if args.exit_on_stdin_eof:
            sys.stdin.read()
            os._exit(0)
        thread.join()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
