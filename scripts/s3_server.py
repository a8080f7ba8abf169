#!/usr/bin/env python3
"""An S3-compatible server on 127.0.0.1 for the test suite: moto's S3 backend,
with every request handled under one lock.

moto checks `If-None-Match: *` and then stores the object as two steps; under
its threaded server two racing create-only puts can both pass the check. The
lock makes each request atomic, as S3's conditional writes are, so the commit
race tests exercise our protocol and not the server's race. Connections are
still accepted concurrently.

moto's list walks, copies and sorts every key of the bucket at every call,
so a list's cost grows with the bucket; S3 answers a page from its key order.
A long soak fills a bucket with tens of thousands of keys, and the server's
own slowdown then hides whether omnigraph's cost stays flat. So each bucket
keeps its key names sorted (kept as keys are stored and removed), and a list
walks only the names of its page, as S3 does; what it answers is unchanged.
moto also keeps every object it ever stored in a registry for its reset;
this server forgets them (`forget_instances`), so its heap holds what the
buckets hold. And a list that names no `max-keys` gets pages of 100 keys
(S3 returns "up to" 1,000): moto renders each key of a page through its
templates, about 0.3 ms a key under the lock, so a 1,000-key page of a
table's `_versions/` (of which Lance reads the first key) cost it ~300 ms,
where S3 answers in constant time. Clients follow the continuation token
either way, so pagination is exercised more, not less.

With OMNIGRAPH_S3_TIMING=FILE in its environment the server also appends one
line per request to FILE: `SECONDS_SINCE_START WAIT_MS SERVICE_MS METHOD
PATH?QUERY` (the wait for the lock, the time under it), to tell which
request grows slow over a long run.

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
import time
import urllib.request
from bisect import bisect_left, bisect_right, insort

from moto.moto_server.werkzeug_app import create_backend_app
from moto.s3.models import FakeDeleteMarker, S3Backend
from moto.s3.utils import _VersionedKeyStore
from werkzeug.serving import WSGIRequestHandler, make_server


def sorted_names(store):
    """The store's key names in order, kept as keys come and go."""
    names = store.__dict__.get("_sorted_names")
    if names is None:
        names = sorted(dict.keys(store))
        store.__dict__["_sorted_names"] = names
    return names


def index_key_names():
    """Keep each bucket's key names sorted, and list from them by page."""
    store = _VersionedKeyStore
    set_item, set_list, pop, del_item = store.__setitem__, store.setlist, store.pop, store.__delitem__

    def added(self, key):
        if not dict.__contains__(self, key):
            insort(sorted_names(self), key)

    def removed(self, key):
        names = sorted_names(self)
        i = bisect_left(names, key)
        if i < len(names) and names[i] == key:
            del names[i]

    def on_set_item(self, key, value):
        added(self, key)
        return set_item(self, key, value)

    def on_set_list(self, key, list_):
        added(self, key)
        return set_list(self, key, list_)

    def on_pop(self, key):
        result = pop(self, key)
        removed(self, key)
        return result

    def on_del_item(self, key):
        del_item(self, key)
        removed(self, key)

    store.__setitem__, store.setlist, store.pop, store.__delitem__ = on_set_item, on_set_list, on_pop, on_del_item

    def page(backend, bucket, prefix, delimiter, after, max_keys):
        """Keys and common prefixes after `after`, in order, at most
        `max_keys` + 1 of them (the extra one says the page is truncated)."""
        names, prefix = sorted_names(bucket.keys), prefix or ""
        i = bisect_left(names, prefix)
        if after:
            i = max(i, bisect_right(names, after))
        out = []
        while i < len(names) and names[i].startswith(prefix) and (max_keys is None or len(out) <= max_keys):
            rest = names[i][len(prefix):]
            if delimiter and delimiter in rest:
                folder = prefix + rest.split(delimiter)[0] + delimiter
                if not after or folder > after:
                    out.append(folder)
                # Every name under the folder sorts before this bound.
                i = bisect_left(names, folder[:-1] + chr(ord(delimiter[-1]) + 1))
                continue
            key = bucket.keys[names[i]]
            if not isinstance(key, FakeDeleteMarker):
                out.append(key)
            i += 1
        return out

    original_v1, original_v2 = S3Backend.list_objects, S3Backend.list_objects_v2

    def list_v1(self, bucket, prefix, delimiter, marker, max_keys):
        if type(bucket.keys) is not store:
            return original_v1(self, bucket, prefix, delimiter, marker, max_keys)
        entries = page(self, bucket, prefix, delimiter, None, None)
        keys = [e for e in entries if not isinstance(e, str)]
        folders = [e for e in entries if isinstance(e, str)]
        if marker:
            keys = self._get_results_from_token(keys, self._pagination_tokens.get(marker) or marker)
        if max_keys is None:
            return keys, folders, False, None
        keys, truncated, next_marker = self._truncate_result(keys, max_keys)
        return keys, folders, truncated, next_marker

    def list_v2(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys):
        if type(bucket.keys) is not store:
            return original_v2(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys)
        after = self._pagination_tokens.get(continuation_token) if continuation_token else start_after
        return self._truncate_result(page(self, bucket, prefix, delimiter, after, max_keys), max_keys)

    S3Backend.list_objects, S3Backend.list_objects_v2 = list_v1, list_v2


class _Untracked(list):
    """A list that keeps nothing: moto's instance registry, unused here."""

    def append(self, _instance):
        pass


def forget_instances():
    """moto keeps every model it ever created (each stored object, each
    overwritten one) in a per-class list, only to dispose of them on reset,
    which this server never does; over a long run that list holds every
    object version written and the server's heap grows with them."""
    from moto.core.model_instances import model_data

    for cls in model_data.get("s3", {}).values():
        cls.instances_tracked = _Untracked()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--bucket", action="append", default=[])
    ap.add_argument("--log")
    ap.add_argument("--exit-on-stdin-eof", action="store_true")
    ap.add_argument("--ignore-conditional-writes", action="store_true")
    args = ap.parse_args()

    os.environ.setdefault("MOTO_S3_DEFAULT_MAX_KEYS", "100")
    index_key_names()
    forget_instances()
    app = create_backend_app("s3")
    lock = threading.Lock()
    log = open(args.log, "a", buffering=1) if args.log else None
    timing_path = os.environ.get("OMNIGRAPH_S3_TIMING")
    timing = open(timing_path, "a", buffering=1) if timing_path else None
    started = time.monotonic()

    def locked(environ, start_response):
        arrived = time.monotonic()
        path = environ.get("PATH_INFO", "")
        if environ.get("QUERY_STRING"):
            path += "?" + environ["QUERY_STRING"]
        with lock:
            acquired = time.monotonic()
            if log is not None:
                auth = environ.get("HTTP_AUTHORIZATION", "")
                key = auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else "-"
                log.write(f"{environ.get('REQUEST_METHOD')} {path} {key}\n")
            if args.ignore_conditional_writes:
                environ.pop("HTTP_IF_NONE_MATCH", None)
            # Materialise the body inside the lock: the response is built lazily.
            body = list(app(environ, start_response))
            if timing is not None:
                wait, service = (acquired - arrived) * 1e3, (time.monotonic() - acquired) * 1e3
                timing.write(f"{arrived - started:.3f} {wait:.2f} {service:.2f} {environ.get('REQUEST_METHOD')} {path}\n")
            return body

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
