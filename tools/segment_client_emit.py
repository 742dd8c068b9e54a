"""Sends track events to a TraqLyte server with Segment's official Python client
(segment-analytics-python, installed by scripts/python-venv.sh) through a lossy loopback
proxy, so the client really retries.

The proxy forwards every request to the server and reads the server's answer; for every
DROP_EVERY-th request it then closes the client's connection without replying, as a
network that lost the reply would (a browser's CORS preflight is passed on, never
dropped; segment_browser_emit.py runs the browser library through the same proxy). The client sees a connection error and re-sends the
same batch (with a new sentAt), which the server must take as a retry.

Reads the events from stdin: a JSON array of {"userId", "event", "properties"}; each is
sent with `timestamp` TIMESTAMP and a messageId the client generates (a new one on every
run: a re-run is a replayed queue with regenerated ids).

With GZIP 1 the client compresses its requests (`gzip=True`: `Content-Encoding: gzip`).

Prints {"requests", "dropped_requests", "dropped_messages", "errors"} on stdout.
Usage: segment_client_emit.py URL WRITE_KEY DROP_EVERY TIMESTAMP [GZIP]
"""

import gzip
import http.client
import json
import sys
import threading
import urllib.parse
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from segment.analytics import Client


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.dropped_requests = 0
        self.dropped_messages = 0
        # The messageIds of every message whose request the client heard a 2xx for.
        self.answered = set()


# Answer headers the proxy passes on besides Content-Type: a browser reads the CORS ones.
PASSED_HEADERS = ("access-control-", "retry-after", "vary")


def messages_of(body, headers):
    """The messages of a request body: a batch's, or the one message."""
    sent = gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body
    parsed = json.loads(sent)
    return parsed.get("batch", [parsed]) if isinstance(parsed, dict) else []


def proxy_handler(target, drop_every, counts):
    parsed = urllib.parse.urlparse(target)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def forward(self, method, body):
            upstream = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            upstream.request(method, self.path, body=body, headers=headers)
            reply = upstream.getresponse()
            data = reply.read()
            upstream.close()
            return reply, data

        def answer(self, reply, data):
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.getheader("Content-Type", "application/json"))
            for name, value in reply.getheaders():
                if name.lower().startswith(PASSED_HEADERS):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_OPTIONS(self):
            # A browser's CORS preflight: passed on, never dropped, not counted.
            self.answer(*self.forward("OPTIONS", None))

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            reply, data = self.forward("POST", body)
            messages = messages_of(body, self.headers)
            with counts.lock:
                counts.requests += 1
                drop = drop_every > 0 and counts.requests % drop_every == 0
                if drop:
                    counts.dropped_requests += 1
                    counts.dropped_messages += len(messages)
                elif 200 <= reply.status < 300:
                    counts.answered.update(m.get("messageId") for m in messages if isinstance(m, dict))
            if drop:
                # The server stored the request's messages; the client never hears so.
                self.close_connection = True
                return
            self.answer(reply, data)

    return Handler


def main():
    url, write_key, drop_every, timestamp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    compress = len(sys.argv) > 5 and sys.argv[5] == "1"
    events = json.load(sys.stdin)
    counts = Counts()
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), proxy_handler(url, drop_every, counts))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    errors = []
    client = Client(
        write_key,
        host="http://127.0.0.1:%d" % proxy.server_address[1],
        upload_size=10,
        upload_interval=0.05,
        max_retries=6,
        gzip=compress,
        on_error=lambda error, batch: errors.append(str(error)),
    )
    at = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    for event in events:
        client.track(user_id=event["userId"], event=event["event"], properties=event["properties"], timestamp=at)
    client.flush()
    client.shutdown()
    proxy.shutdown()
    print(json.dumps({
        "requests": counts.requests,
        "dropped_requests": counts.dropped_requests,
        "dropped_messages": counts.dropped_messages,
        "errors": errors,
    }))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
