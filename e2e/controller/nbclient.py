"""A Jupyter client through kdet's task proxy, for the notebook checks of
e2e/controller/notebooks.sh (kdet-local) and e2e/kube/install.sh (real nodes).

usage: nbclient.py URL TASK TOKEN kernel CODE EXPECT
       nbclient.py URL TASK TOKEN terminal COMMAND EXPECT

kernel: starts a kernel (POST api/kernels), opens its channels over a
WebSocket (.../proxy/TASK/api/kernels/ID/channels) with the user's token,
runs CODE with an execute_request on the shell channel, and prints what the
kernel wrote on its stream. Then closes the WebSocket (the kernel stays,
idle).

terminal: starts a terminal (POST api/terminals: terminado behind Jupyter),
opens .../terminals/websocket/NAME, types COMMAND and a carriage
return, and prints what the terminal's shell wrote. Then closes the
WebSocket and deletes the terminal (DELETE api/terminals/NAME, 204), so
that it no longer counts as use of the notebook.

Exits 0 when EXPECT is in what was printed. An https URL is verified
against the CA file in KDET_API_CA_FILE when set. Uses Debian's
python3-websocket.
"""
import json
import os
import ssl
import sys
import time
import urllib.request
import uuid

import websocket

url, task, token, mode, what, expect = sys.argv[1:7]
base = "%s/proxy/%s/" % (url, task)
auth = {"Authorization": "Bearer " + token}
ca = os.environ.get("KDET_API_CA_FILE") or None
ctx = ssl.create_default_context(cafile=ca) if url.startswith("https://") else None
sslopt = {"ca_certs": ca} if ca and url.startswith("https://") else None


def call(method, path, body=None):
    """One request to Jupyter through the proxy: (status, decoded JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    rq = urllib.request.Request(base + path, data=data, method=method,
                                headers=dict(auth, **{"Content-Type": "application/json"}))
    with urllib.request.urlopen(rq, timeout=60, context=ctx) as r:
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)


def channel(path):
    ws_base = base.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return websocket.create_connection(ws_base + path, header=["Authorization: Bearer " + token],
                                       timeout=60, sslopt=sslopt)


def kernel(code):
    _, k = call("POST", "api/kernels", {})
    print("kernel", k["id"], k.get("execution_state"))
    ws = channel("api/kernels/%s/channels?session_id=%s" % (k["id"], uuid.uuid4().hex))
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "e2e", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3",
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
    }))
    out, deadline = "", time.time() + 60
    while time.time() < deadline:
        m = json.loads(ws.recv())
        if m.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream":
            out += m["content"]["text"]
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" and out:
            break
    ws.close()
    return out


def terminal(command):
    _, t = call("POST", "api/terminals", {})
    name = t["name"]
    print("terminal", name)
    ws = channel("terminals/websocket/%s" % name)
    ws.send(json.dumps(["stdin", command + "\r"]))
    out, deadline = "", time.time() + 60
    while time.time() < deadline and expect not in out:
        m = json.loads(ws.recv())
        if m and m[0] == "stdout":
            out += m[1]
    ws.close()
    status, _ = call("DELETE", "api/terminals/%s" % name)
    print("terminal deleted", status)
    return out


if mode == "kernel":
    got = kernel(what)
elif mode == "terminal":
    got = terminal(what)
else:
    sys.exit("nbclient.py: mode must be kernel or terminal, not %r" % mode)
print("stream", json.dumps(got))
sys.exit(0 if expect in got else 1)
