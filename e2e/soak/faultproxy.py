"""A TCP proxy on 127.0.0.1 that injects network faults between a client and
its server(s): the soak test (e2e/soak/soak.py) puts one between trial
workers and the controller API and one between the controller and
PostgreSQL.

Modes (set_mode), applied at once to new and open connections:
  pass       forward bytes both ways
  delay MS   forward, each chunk held MS milliseconds first
  drop       new connections are accepted and closed at once (no bytes);
             open ones go on
  reset      open connections are reset (RST), new ones too
  blackhole  nothing is forwarded and nothing closed: open connections
             stall, new ones are accepted and never answered

Upstreams are tried in turn (round robin), the next one when a connect
fails, as a Service in front of several replicas. An upstream is
("tcp", host, port) or ("unix", path). Thread per connection; the
connections here are few (a controller's pool, the workers of a few trials).

Standalone: faultproxy.py LISTEN_PORT UPSTREAM... reads modes from stdin
("delay 200", "blackhole", "pass"), one a line.
"""
import socket
import struct
import sys
import threading
import time

MODES = ("pass", "delay", "drop", "reset", "blackhole")


def _rst(s):
    """Close with an RST instead of a FIN."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


class FaultProxy:
    def __init__(self, upstreams, port=0, name="proxy"):
        self.name = name
        self.upstreams = list(upstreams)
        self.mode = "pass"
        self.delay_ms = 0
        self.epoch = 0  # bumped by every set_mode: a reset reaches connections opened before
        self.lock = threading.Lock()
        self.conns = set()
        self.stats = {"accepted": 0, "refused": 0, "reset": 0, "upstream_failed": 0}
        self.rr = 0
        self.stopping = False
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", port))
        self.ls.listen(128)
        self.port = self.ls.getsockname()[1]
        self.thread = threading.Thread(target=self._accept_loop, name=name, daemon=True)
        self.thread.start()

    def set_mode(self, mode, delay_ms=0):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        with self.lock:
            self.mode = mode
            self.delay_ms = int(delay_ms)
            self.epoch += 1
            conns = list(self.conns) if mode == "reset" else []
        for c in conns:
            c.reset()

    def stop(self):
        self.stopping = True
        try:
            self.ls.close()
        except OSError:
            pass
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            c.reset()

    def _connect_upstream(self):
        # One start per connection, then each upstream in turn from there:
        # connections that connect at once must not take each other's turns
        # (two of them could otherwise both land on a dead upstream).
        n = len(self.upstreams)
        with self.lock:
            start = self.rr
            self.rr += 1
        for i in range(n):
            up = self.upstreams[(start + i) % n]
            try:
                if up[0] == "unix":
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.settimeout(3)
                    s.connect(up[1])
                else:
                    s = socket.create_connection((up[1], up[2]), timeout=3)
                s.settimeout(None)
                return s
            except OSError:
                with self.lock:
                    self.stats["upstream_failed"] += 1
        return None

    def _accept_loop(self):
        while not self.stopping:
            try:
                c, _ = self.ls.accept()
            except OSError:
                if self.stopping:
                    return
                time.sleep(0.05)
                continue
            with self.lock:
                mode = self.mode
                self.stats["accepted"] += 1
            if mode == "drop":
                with self.lock:
                    self.stats["refused"] += 1
                c.close()
                continue
            if mode == "reset":
                with self.lock:
                    self.stats["reset"] += 1
                _rst(c)
                continue
            conn = _Conn(self, c)
            with self.lock:
                self.conns.add(conn)
            threading.Thread(target=conn.run, name=self.name + "-conn", daemon=True).start()


class _Conn:
    def __init__(self, proxy, client):
        self.p = proxy
        self.c = client
        self.u = None
        self.dead = False

    def reset(self):
        self.dead = True
        with self.p.lock:
            self.p.stats["reset"] += 1
        _rst(self.c)
        if self.u is not None:
            _rst(self.u)

    def _close(self):
        self.dead = True
        for s in (self.c, self.u):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        with self.p.lock:
            self.p.conns.discard(self)

    def run(self):
        import select
        try:
            # A blackholed connection does not even reach the server.
            while not self.dead and self.p.mode == "blackhole":
                time.sleep(0.1)
            if self.dead:
                return
            self.u = self.p._connect_upstream()
            if self.u is None:
                _rst(self.c)
                return
            while not self.dead:
                mode, delay = self.p.mode, self.p.delay_ms
                if mode == "blackhole":
                    time.sleep(0.1)
                    continue
                r, _, _ = select.select([self.c, self.u], [], [], 0.2)
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    if mode == "delay" and delay > 0:
                        time.sleep(delay / 1000.0)
                    (self.u if s is self.c else self.c).sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            self._close()


def _parse_upstream(s):
    if s.startswith("unix:"):
        return ("unix", s[5:])
    host, _, port = s.rpartition(":")
    return ("tcp", host or "127.0.0.1", int(port))


def main(argv):
    if len(argv) < 3:
        print("usage: faultproxy.py LISTEN_PORT UPSTREAM... (host:port or unix:PATH)",
              file=sys.stderr)
        return 2
    p = FaultProxy([_parse_upstream(a) for a in argv[2:]], port=int(argv[1]))
    print(f"listening on 127.0.0.1:{p.port}", flush=True)
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        try:
            p.set_mode(w[0], int(w[1]) if len(w) > 1 else 0)
            print(f"mode {p.mode} delay_ms={p.delay_ms} stats={p.stats}", flush=True)
        except ValueError as e:
            print(e, file=sys.stderr, flush=True)
    p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
