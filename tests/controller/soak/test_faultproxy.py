#!/usr/bin/python3
"""The soak test's fault proxy (e2e/soak/faultproxy.py) against a real echo
server on 127.0.0.1: each mode does what it says, on new and on open
connections, and a dead upstream is skipped."""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.environ.get("KD_SRC", "."), "e2e", "soak"))
from faultproxy import FaultProxy  # noqa: E402

PASSED = FAILED = 0


def check(what, ok):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"ok - {what}")
    else:
        FAILED += 1
        print(f"FAIL - {what}")


def echo_server(tag):
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)

    def serve(c):
        with c:
            while True:
                try:
                    d = c.recv(4096)
                except OSError:
                    return
                if not d:
                    return
                c.sendall(tag + d)

    def loop():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return ls.getsockname()[1]


def talk(port, msg=b"x", timeout=2.0, sock=None):
    s = sock or socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    s.sendall(msg)
    return s, s.recv(100)


def main():
    a = echo_server(b"a:")
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dport = dead.getsockname()[1]
    dead.close()  # nothing listens there
    p = FaultProxy([("tcp", "127.0.0.1", dport), ("tcp", "127.0.0.1", a)])
    s, got = talk(p.port, b"hi")
    check("pass: bytes go through (a dead upstream is skipped)", got == b"a:hi")
    check("the dead upstream was tried and counted", p.stats["upstream_failed"] >= 1)

    p.set_mode("delay", 300)
    t = time.time()
    _, got = talk(p.port, b"d", sock=s)
    check(f"delay 300 ms: answered after {time.time() - t:.2f}s", got == b"a:d" and
          time.time() - t >= 0.3)

    p.set_mode("drop")
    try:
        _, got = talk(p.port, b"x", timeout=2)
    except OSError:
        got = b""
    check("drop: a new connection is closed without an answer", got == b"")
    _, got = talk(p.port, b"o", sock=s)
    check("drop: an open connection goes on", got == b"a:o")

    p.set_mode("blackhole")
    try:
        talk(p.port, b"b", timeout=1, sock=s)
        got = "answered"
    except socket.timeout:
        got = "timeout"
    except OSError as e:
        got = str(e)
    check("blackhole: an open connection stalls", got == "timeout")
    try:
        talk(p.port, b"n", timeout=1)
        got = "answered"
    except socket.timeout:
        got = "timeout"
    except OSError as e:
        got = str(e)
    check("blackhole: a new connection is never answered", got == "timeout")

    p.set_mode("pass")
    s2, got = talk(p.port, b"again")
    check("pass again: new connections work", got == b"a:again")
    p.set_mode("reset")
    try:
        s2.sendall(b"r")
        got = s2.recv(10)
        got = "eof" if got == b"" else "answered"
    except ConnectionResetError:
        got = "reset"
    except OSError as e:
        got = str(e)
    check(f"reset: an open connection is reset ({got})", got in ("reset", "eof"))
    try:
        talk(p.port, b"x")
        got = "answered"
    except ConnectionResetError:
        got = "reset"
    except OSError as e:
        got = "reset" if "reset" in str(e).lower() else str(e)
    check(f"reset: a new connection is reset ({got})", got == "reset")
    p.set_mode("pass")
    _, got = talk(p.port, b"end")
    check("back to pass", got == b"a:end")

    # Connections that connect at the same time each try every upstream:
    # none is refused because others took the live upstream's turn.
    p.set_mode("blackhole")
    socks = [socket.create_connection(("127.0.0.1", p.port), timeout=5) for _ in range(12)]
    for i, c in enumerate(socks):
        c.sendall(b"%d" % i)
    time.sleep(0.3)
    p.set_mode("pass")
    answers = []
    for i, c in enumerate(socks):
        c.settimeout(5)
        try:
            answers.append(c.recv(100) == b"a:%d" % i)
        except OSError:
            answers.append(False)
        c.close()
    check(f"12 connections at once, a dead upstream first: {sum(answers)} answered",
          all(answers))
    try:
        p.set_mode("bogus")
        check("an unknown mode is refused", False)
    except ValueError:
        check("an unknown mode is refused", True)
    p.stop()
    print(f"{PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
