"""The soak test's Kubernetes client: the REST calls it needs (get, list,
create, merge patch, delete, watch with resume) against kdet-local over
HTTPS with the kubeconfig's bearer token and CA. Faster than a kubectl
process per call on a busy machine, and every failure is an exception the
caller expects (the API server is one of the things the soak kills)."""
import base64
import http.client
import json
import ssl
import urllib.parse

import yaml


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {str(body)[:300]}")
        self.status = status
        self.body = body


class Kube:
    def __init__(self, kubeconfig):
        with open(kubeconfig) as f:
            kc = yaml.safe_load(f)
        cl = kc["clusters"][0]["cluster"]
        u = urllib.parse.urlparse(cl["server"])
        self.host, self.port = u.hostname, u.port
        self.token = kc["users"][0]["user"]["token"]
        self.ctx = None
        if u.scheme == "https":
            ca = base64.b64decode(cl["certificate-authority-data"]).decode()
            self.ctx = ssl.create_default_context(cadata=ca)

    def connection(self, timeout):
        """A new connection to the API server, not yet opened; the caller
        closes it. req() takes one per call; a caller that sends many
        requests in a row can keep one alive (with self.token's header)."""
        if self.ctx is not None:
            return http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                               timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def req(self, method, path, body=None, ctype="application/json", timeout=10):
        c = self.connection(timeout)
        try:
            h = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                h["Content-Type"] = ctype
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            raw = r.read()
            try:
                out = json.loads(raw) if raw else {}
            except ValueError:
                out = raw.decode(errors="replace")
            if r.status >= 300:
                raise ApiError(r.status, out)
            return out
        finally:
            c.close()

    def get(self, path):
        return self.req("GET", path)

    def items(self, path):
        return self.req("GET", path).get("items", [])

    def patch(self, path, body):
        return self.req("PATCH", path, body, "application/merge-patch+json")

    def create(self, path, body):
        return self.req("POST", path, body)

    def delete(self, path):
        return self.req("DELETE", path)

    def watch(self, path, rv, on_event, stop):
        """Watch PATH from resourceVersion rv, calling on_event(type, obj)
        for each event; returns the last resourceVersion seen when the
        stream ends (server gone, or stop() true). Raises ApiError(410)
        when rv is too old."""
        sep = "&" if "?" in path else "?"
        c = self.connection(30)
        try:
            c.request("GET", f"{path}{sep}watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
                      f"&timeoutSeconds=25",
                      headers={"Authorization": f"Bearer {self.token}"})
            r = c.getresponse()
            if r.status >= 300:
                raise ApiError(r.status, r.read().decode(errors="replace"))
            while not stop():
                line = r.readline()
                if not line:
                    break
                ev = json.loads(line)
                obj = ev.get("object", {})
                if ev.get("type") == "ERROR":
                    raise ApiError(obj.get("code", 500), obj)
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if ev.get("type") != "BOOKMARK":
                    on_event(ev["type"], obj)
            return rv
        finally:
            c.close()
