"""Sends Segment messages to a TraqLyte server from Segment's official browser library
(analytics.js 2.0, @segment/analytics-next, installed into tools/browser by
scripts/browser-sdk.sh) running in headless Chromium on a page of another origin, through
the lossy proxy of segment_client_emit.py, so the library really retries and the browser
really enforces CORS.

The page is served by this script from its own loopback port (the library's lazily
loaded bundles beside it, so nothing is fetched from Segment's CDN). It loads the library
with the Segment.io destination pointed at the proxy (`apiHost` PROXY/v1, as a user
points it at their TraqLyte host), identifies `user-1` and tracks COUNT - 1 orders. With
STRATEGY `standard` the library posts each message alone to `/v1/i` and `/v1/t`; with
`batching` it posts `/v1/b` (with `X-Retry-Count` on retries). Either way as
`text/plain`, with the write key in the body and as HTTP Basic auth, so every request is
preflighted. Then the page posts one more message straight to the server's `/v1/track`
with `fetch`, a JSON body and Basic auth (preflighted), and reports that answer.

Waits until the proxy has relayed a 2xx for every one of the COUNT messageIds and the
page has reported, at most 120 s.

Prints {"requests", "dropped_requests", "dropped_messages", "answered", "page"} on stdout.
Usage: segment_browser_emit.py URL WRITE_KEY DROP_EVERY STRATEGY COUNT
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from segment_client_emit import Counts, proxy_handler

BUNDLES = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "browser", "node_modules", "@segment", "analytics-next", "dist", "umd",
)

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>shop</title></head><body>
<script src="/analytics-next/bundles/index.js"></script>
<script>
(async () => {
  const config = %(config)s;
  const report = {};
  try {
    const settings = {integrations: {"Segment.io": {
      apiKey: config.key, apiHost: config.proxyHost + "/v1", protocol: "http",
      deliveryStrategy: config.strategy === "batching"
        ? {strategy: "batching", config: {size: 5, timeout: 200}}
        : {strategy: "standard"}}}};
    const [analytics] = await AnalyticsNext.AnalyticsBrowser.load(
      {writeKey: config.key, cdnURL: location.origin, cdnSettings: settings},
      {disableClientPersistence: true});
    await analytics.identify("user-1", {plan: "pro"});
    for (let i = 0; i < config.count - 1; i++) {
      analytics.track("Order Completed", {order_id: "order-" + i, revenue: 1.25 * i});
    }
    const answer = await fetch(config.server + "/v1/track", {
      method: "POST",
      headers: {"Content-Type": "application/json", "Authorization": "Basic " + btoa(config.key + ":")},
      body: JSON.stringify({userId: "user-1", event: "Preflighted", messageId: "preflighted-" + config.strategy})});
    report.preflighted = {status: answer.status, body: await answer.json()};
  } catch (error) {
    report.error = String(error);
  }
  await fetch("/done", {method: "POST", body: JSON.stringify(report)});
})();
</script></body></html>
"""


def page_handler(page, reports):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, content_type, data):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = urllib.parse.urlparse(self.path).path
            if path == "/":
                return self.reply(200, "text/html; charset=utf-8", page.encode())
            prefix = "/analytics-next/bundles/"
            name = path[len(prefix):] if path.startswith(prefix) else ""
            if name and "/" not in name and os.path.isfile(os.path.join(BUNDLES, name)):
                with open(os.path.join(BUNDLES, name), "rb") as f:
                    return self.reply(200, "text/javascript", f.read())
            self.reply(404, "text/plain", b"not found")

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/done":
                reports.append(json.loads(body))
            self.reply(204, "text/plain", b"")

    return Handler


def serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    url, write_key, drop_every, strategy, count = (
        sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    if not os.path.isfile(os.path.join(BUNDLES, "index.js")):
        print("%s is missing: run scripts/browser-sdk.sh (scripts/test does)" % BUNDLES, file=sys.stderr)
        return 2
    counts = Counts()
    proxy = serve(proxy_handler(url, drop_every, counts))
    config = {
        "key": write_key,
        "proxyHost": "127.0.0.1:%d" % proxy.server_address[1],
        "server": url,
        "strategy": strategy,
        "count": count,
    }
    reports = []
    site = serve(page_handler(PAGE % {"config": json.dumps(config)}, reports))
    profile = tempfile.mkdtemp(prefix="traqlyte_browser_sdk_")
    browser = os.environ.get("TRAQLYTE_TEST_CHROMIUM", "chromium")
    chromium = subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-quic", "--remote-debugging-port=0",
         "--user-data-dir=" + profile, "http://127.0.0.1:%d/" % site.server_address[1]],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and chromium.poll() is None:
        with counts.lock:
            answered = len(counts.answered)
        if answered >= count and reports:
            break
        time.sleep(0.1)
    exited = chromium.poll()
    chromium.kill()
    _, stderr = chromium.communicate()
    shutil.rmtree(profile, ignore_errors=True)
    proxy.shutdown()
    site.shutdown()
    with counts.lock:
        result = {
            "requests": counts.requests,
            "dropped_requests": counts.dropped_requests,
            "dropped_messages": counts.dropped_messages,
            "answered": len(counts.answered),
            "page": reports[0] if reports else None,
        }
    print(json.dumps(result))
    if exited is not None:
        print("chromium exited early (%s): %s" % (exited, stderr.decode(errors="replace")[-2000:]), file=sys.stderr)
        return 1
    return 0 if result["answered"] >= count and reports else 1


if __name__ == "__main__":
    sys.exit(main())
