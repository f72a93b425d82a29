#!/usr/bin/env python3
"""Raw-socket HTTP probes for tests/lib/http/servers.sh.

  rawhttp.py probe PORT CASE [PATH]   one hostile request; prints
        status=CODE answers=N closed=0|1 smuggled=0|1 body=...
  rawhttp.py flood PORT PATH N SIZE [TOKEN]   N connections at once, each
        announcing a SIZE-byte body with a wrong token; prints
        statuses=CODE:COUNT,... early=K (answers before any body byte)
"""
import socket
import sys
import threading

WAIT_S = 15


def read_all(s):
    out, closed = b"", False
    s.settimeout(WAIT_S)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                closed = True
                break
            out += b
    except ConnectionResetError:
        closed = True
    except socket.timeout:
        pass
    return out, closed


def probe(port, case, path):
    smuggle = b"GET /smuggled-path HTTP/1.1\r\nHost: x\r\n\r\n"
    reqs = {
        "cl-te": b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (5 + len(smuggle)) + smuggle,
        "two-cl": b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
        b"Content-Length: %d\r\n\r\n" % len(smuggle) + smuggle,
        "te-gzip": b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc",
        "nul": b"GET " + path + b"%00x HTTP/1.1\r\nHost: x\r\n\r\n",
        "space": b"G E T " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        "tls-hello": bytes.fromhex("16030100a5010000a10303") + b"\0" * 40,
    }
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(reqs[case])
    out, closed = read_all(s)
    s.close()
    text = out.decode(errors="replace")
    status = text.split(" ", 2)[1] if text.startswith("HTTP/") else "none"
    body = text.split("\r\n\r\n", 1)[1][:300].replace("\n", " ") if "\r\n\r\n" in text else ""
    print("status=%s answers=%d closed=%d smuggled=%d body=%s" % (
        status, text.count("HTTP/1.1 "), closed, "smuggled-path" in text, body))


def flood(port, path, n, size, token):
    chunk = b"x" * 65536
    statuses, early, lock = {}, [0], threading.Lock()
    start = threading.Barrier(n)

    def one():
        s = socket.create_connection(("127.0.0.1", port))
        head = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + \
            b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % size
        start.wait()
        s.sendall(head)
        s.settimeout(WAIT_S)
        got = b""
        try:
            got = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            pass
        if got:
            with lock:
                early[0] += 1
        # A hostile client sends its body whatever the answer.
        sent = 0
        try:
            while sent < size:
                sent += s.send(chunk[:min(len(chunk), size - sent)])
        except OSError:
            pass
        if not got:
            got, _ = read_all(s)
        s.close()
        text = got.decode(errors="replace")
        code = text.split(" ", 2)[1] if text.startswith("HTTP/") else "none"
        with lock:
            statuses[code] = statuses.get(code, 0) + 1

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("statuses=%s early=%d" % (",".join("%s:%d" % kv for kv in sorted(statuses.items())),
                                     early[0]))


def main():
    if sys.argv[1] == "probe":
        probe(int(sys.argv[2]), sys.argv[3], (sys.argv[4] if len(sys.argv) > 4 else "/a").encode())
    else:
        flood(int(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4]), int(sys.argv[5]),
              (sys.argv[6] if len(sys.argv) > 6 else "wrong").encode())


if __name__ == "__main__":
    main()
