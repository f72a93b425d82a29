#!/usr/bin/env python3
"""Another writer on a Trial: patch one of its annotations up to HZ times a
second, over one kept-alive connection, until STOPFILE exists (or SECONDS
pass), so that the controller's copy of the Trial is often stale when it
writes the Trial's status (409 Conflict).
Usage: touch.py KUBECONFIG NAMESPACE TRIAL HZ SECONDS STOPFILE
Prints how many patches landed."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "soak"))
from kube import Kube  # noqa: E402


def main():
    kc, ns, name, hz, seconds, stop = sys.argv[1:7]
    k = Kube(kc)
    path = f"/apis/kdet.io/v1alpha1/namespaces/{ns}/trials/{name}"
    head = {"Authorization": f"Bearer {k.token}", "Accept": "application/json",
            "Content-Type": "application/merge-patch+json"}
    end = time.monotonic() + float(seconds)
    landed = i = 0
    conn = None
    while time.monotonic() < end and not os.path.exists(stop):
        i += 1
        body = json.dumps({"metadata": {"annotations": {"kdet.test/touch": str(i)}}})
        try:
            if conn is None:
                conn = k.connection(10)
            conn.request("PATCH", path, body=body, headers=head)
            r = conn.getresponse()
            r.read()
            if r.status < 300:
                landed += 1
            elif r.status != 404:  # 404: not created yet, or gone
                sys.exit(f"touch: HTTP {r.status}")
        except OSError:
            conn = None  # the server closed it or is busy: a new connection next time
        time.sleep(1 / float(hz))
    print(landed)


if __name__ == "__main__":
    main()
