"""A Jupyter client through kdet's task proxy, for e2e/controller/notebooks.sh.

usage: nbclient.py URL TASK TOKEN CODE EXPECT

Starts a kernel (POST api/kernels), opens its channels over a WebSocket
(ws://.../proxy/TASK/api/kernels/ID/channels) with the user's token, runs
CODE with an execute_request on the shell channel, and prints what the
kernel wrote on its stream; exits 0 when EXPECT is in it. Then closes the
WebSocket (the kernel stays, idle). Uses Debian's python3-websocket.
"""
import json
import sys
import time
import urllib.request
import uuid

import websocket

url, task, token, code, expect = sys.argv[1:6]
base = "%s/proxy/%s/" % (url, task)
auth = {"Authorization": "Bearer " + token}

rq = urllib.request.Request(base + "api/kernels", data=b"{}", method="POST",
                            headers=dict(auth, **{"Content-Type": "application/json"}))
kernel = json.load(urllib.request.urlopen(rq, timeout=60))
print("kernel", kernel["id"], kernel.get("execution_state"))

ws = websocket.create_connection(
    base.replace("http://", "ws://") + "api/kernels/%s/channels?session_id=%s" %
    (kernel["id"], uuid.uuid4().hex), header=["Authorization: Bearer " + token], timeout=60)
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
print("stream", json.dumps(out))
sys.exit(0 if expect in out else 1)
