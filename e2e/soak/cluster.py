"""The soak test's cluster, as `det deploy local up` and e2e/controller/lib.sh
start it, plus what the faults need: a private PostgreSQL (as nobody when
root) on a small file system of its own, kdet-local with fake GPUs, a
`kdet-local kubelet` node agent, two kdet-controller replicas with leader
election, and the fault proxies in front of PostgreSQL and of the
controllers' API. Every daemon is supervised like a Deployment's pod: when
it dies and no fault holds it down, it is started again and the exit is
recorded."""
import glob
import os
import signal
import socket
import subprocess
import threading
import time

from faultproxy import FaultProxy


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def alive(pid):
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid):
    out = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d[6:]))
        except (OSError, ValueError, IndexError):
            pass
    return out


class Daemon:
    """One supervised process started with Popen (log appended to LOG)."""

    def __init__(self, c, name, argv, env=None, restart_delay=0.5):
        self.c, self.name, self.argv, self.env = c, name, argv, env
        self.log = os.path.join(c.T, name + ".log")
        self.proc = None
        self.hold = 0  # faults holding it down
        self.exits = []  # (time, returncode) of exits nobody asked for
        self.starts = 0
        self.restart_delay = restart_delay
        self.down_since = None
        self.lock = threading.Lock()

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def start(self):
        env = dict(os.environ)
        env.update(self.env or {})
        lf = open(self.log, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=lf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=self.c.T)
        lf.close()
        self.starts += 1

    def up(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.up():
            self.proc.kill()
            self.proc.wait()

    def term(self, timeout=20):
        if self.up():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "killed"
        return None

    def supervise(self, now):
        """Restart when down and not held; returns a note when it restarted one that died
        by itself."""
        with self.lock:
            if self.hold > 0 or self.up():
                self.down_since = None
                return None
            if self.down_since is None:
                self.down_since = now
                return None
            if now - self.down_since < self.restart_delay:
                return None
            note = None
            if self.proc is not None and self.proc.returncode is not None and \
                    self.proc.returncode != -9:
                self.exits.append((now, self.proc.returncode))
                note = f"{self.name} exited by itself (status {self.proc.returncode}); restarted"
            self.proc = None
            self.start()
            self.down_since = None
            return note


class Postgres:
    """PostgreSQL on a unix socket, run by pg_ctl (as nobody when root)."""

    def __init__(self, c):
        self.c = c
        self.bindir = os.environ.get("KD_PG_BINDIR") or sorted(
            glob.glob("/usr/lib/postgresql/*/bin"))[-1]
        self.dir = os.path.join(c.pgfs, "pg")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(c.T, "postgres.log")
        self.name = "postgres"
        self.hold = 0
        self.exits = []
        self.starts = 0
        self.lock = threading.Lock()
        self.down_since = None
        self.restart_delay = 1.0
        self.killed = False
        self.opts = (f"-k {self.dir} -c listen_addresses='' -c fsync=off -c max_wal_size=64MB "
                     f"-c min_wal_size=32MB -c checkpoint_timeout=60s")

    def run(self, *argv, check=True):
        pre = []
        if os.getuid() == 0:
            pre = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        return subprocess.run(pre + list(argv), check=check, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd="/")

    def init(self):
        os.makedirs(self.dir, exist_ok=True)
        if os.getuid() == 0:
            os.chown(self.dir, 65534, 65534)
        self.run(f"{self.bindir}/initdb", "-D", self.data, "-U", "kdet", "-A", "trust",
                 "--no-sync")
        with open(self.log, "a"):
            pass
        if os.getuid() == 0:
            os.chown(self.log, 65534, 65534)
        self.start()
        self.run(f"{self.bindir}/createdb", "-h", self.dir, "-U", "kdet", "kdet")

    def start(self):
        self.starts += 1
        r = self.run(f"{self.bindir}/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "20",
                     "-o", self.opts, "start", check=False)
        return r.returncode == 0

    @property
    def pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def up(self):
        return alive(self.pid)

    def kill9(self):
        pid = self.pid
        if not alive(pid):
            return
        self.killed = True
        kids = children(pid)
        for p in [pid] + kids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        for _ in range(100):
            if not alive(pid):
                break
            time.sleep(0.1)

    def stop(self):
        self.run(f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop",
                 check=False)

    def supervise(self, now):
        with self.lock:
            if self.hold > 0 or self.up():
                self.down_since = None
                return None
            if self.down_since is None:
                self.down_since = now
                return None
            if now - self.down_since < self.restart_delay:
                return None
            self.down_since = now  # next try after the delay again
            ok = self.start()
            if not self.killed:
                self.exits.append((now, "down"))
            self.killed = not ok and self.killed
            return f"postgres found down; restart {'ok' if ok else 'failed'}"

    def sql(self, q, timeout=30):
        """Rows of q as lists of strings ('|' separated columns); raises on failure."""
        r = subprocess.run([f"{self.bindir}/psql", "-h", self.dir, "-U", "kdet", "-d", "kdet",
                            "-tAqX", "-v", "ON_ERROR_STOP=1", "-c", q], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"psql: {r.stderr.strip()[:300]}")
        return [ln.split("|") for ln in r.stdout.splitlines() if ln != ""]


class Cluster:
    def __init__(self, T, build, src, log):
        self.T, self.build, self.src, self.say = T, build, src, log
        self.bin = os.path.join(build, "bin")
        self.pgfs = os.path.join(T, "pgfs")
        self.ckpt = os.path.join(T, "ckpt")
        self.mounts = []
        self.daemons = []
        self.stop_flag = False
        self.notes = []

    def mount_tmpfs(self, path, size_mb, owner=None):
        os.makedirs(path, exist_ok=True)
        if os.getuid() != 0:
            return False
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs",
                        path], check=True)
        self.mounts.append(path)
        if owner is not None:
            os.chown(path, owner, owner)
        return True

    def kubeconfig(self):
        return os.path.join(self.T, "kubeconfig")

    def start(self, gpus_local=2, gpus_agent=2):
        T = self.T
        os.chmod(T, 0o755)
        self.rooted = self.mount_tmpfs(self.pgfs, 320) and self.mount_tmpfs(self.ckpt, 160)
        os.makedirs(os.path.join(T, "spool-a"), exist_ok=True)
        os.makedirs(os.path.join(T, "spool-b"), exist_ok=True)
        self.pg = Postgres(self)
        self.pg.init()
        self.say(f"PostgreSQL up in {self.pg.dir}")
        env = {"PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        self.kport = free_port()
        self.local = Daemon(self, "kdet-local", [
            f"{self.bin}/kdet-local", "--data-dir", f"{T}/data", "--port", str(self.kport),
            "--kubeconfig-out", self.kubeconfig(), "--fake-gpus", str(gpus_local),
            "--node-name", "soak-n0", "--compact-bytes", "512MiB", "--watch-history", "200000"],
            env)
        self.local.start()
        self.wait(lambda: os.path.exists(self.kubeconfig()), 20, "kdet-local's kubeconfig")
        import kube
        self.kube = kube.Kube(self.kubeconfig())
        self.wait(lambda: self._ok(lambda: self.kube.get("/api/v1/nodes/soak-n0")), 20,
                  "node soak-n0")
        for f in ("crds/", "manifests/priorityclasses.yaml"):
            subprocess.run(["kubectl", "apply", "-f", os.path.join(self.src, f)], check=True,
                           stdout=subprocess.DEVNULL, env={**os.environ,
                                                          "KUBECONFIG": self.kubeconfig()})
        self.agent = Daemon(self, "agent", [
            f"{self.bin}/kdet-local", "kubelet", "--kubeconfig", self.kubeconfig(),
            "--node-name", "soak-n1", "--fake-gpus", str(gpus_agent), "--port", "0",
            "--state-dir", f"{T}/agent"], env)
        self.agent.start()
        self.wait(lambda: self._ready("soak-n1"), 30, "node soak-n1 Ready")
        # The proxies: workers -> the API of either replica; the controllers -> PostgreSQL.
        self.api_ports = {"a": free_port(), "b": free_port()}
        self.api_proxy = FaultProxy([("tcp", "127.0.0.1", p) for p in self.api_ports.values()],
                                    name="api-proxy")
        self.pg_proxy = FaultProxy([("unix", os.path.join(self.pg.dir, ".s.PGSQL.5432"))],
                                   name="pg-proxy")
        with open(os.path.join(T, "user-token"), "w") as f:
            f.write("soak-user-token-0123456789abcdef0123\n")
        self.ctrl = {}
        for r in ("a", "b"):
            self.ctrl[r] = Daemon(self, f"ctrl-{r}", [
                f"{self.bin}/kdet-controller", "--kubeconfig", self.kubeconfig(), "--workers", "2",
                "--resync", "5", "--plain-http", "--namespace", "default",
                "--leader-elect", "on", "--lease-namespace", "default",
                "--database-url", f"host=127.0.0.1 port={self.pg_proxy.port} user=kdet "
                                  f"dbname=kdet connect_timeout=5",
                "--api-listen", f"127.0.0.1:{self.api_ports[r]}",
                "--controller-url", f"http://127.0.0.1:{self.api_proxy.port}",
                "--spool-dir", f"{T}/spool-{r}", "--user-token-file", f"{T}/user-token",
                "--idle-release-after", "3"], env, restart_delay=1.0)
            self.ctrl[r].start()
        self.daemons = [self.local, self.agent, self.ctrl["a"], self.ctrl["b"], self.pg]
        self.wait(lambda: any("msg=leading" in open(d.log, errors="replace").read()
                              for d in self.ctrl.values()), 40, "a leading controller")
        self.sup = threading.Thread(target=self._supervise, daemon=True)
        self.sup.start()

    def _ok(self, f):
        try:
            f()
            return True
        except Exception:
            return False

    def _ready(self, node):
        try:
            n = self.kube.get(f"/api/v1/nodes/{node}")
        except Exception:
            return False
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in n.get("status", {}).get("conditions", []))

    def wait(self, cond, secs, what):
        end = time.time() + secs
        while time.time() < end:
            if cond():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {secs}s waiting for {what}")

    def _supervise(self):
        while not self.stop_flag:
            now = time.time()
            for d in self.daemons:
                try:
                    n = d.supervise(now)
                except Exception as e:  # a start that failed: try again on the next round
                    n = f"{d.name}: restart failed: {e}"
                if n:
                    self.notes.append((now, n))
                    self.say(n)
            time.sleep(0.3)

    def healthy(self):
        """Every daemon up, and the API server answers."""
        if not all(d.up() for d in self.daemons):
            return False
        return self._ok(lambda: self.kube.get("/api/v1/namespaces/default"))

    def ctrl_pids(self):
        return [d.pid for d in self.ctrl.values() if d.up()]

    def stop(self):
        """Stop whatever was started (also after a start that failed half-way)."""
        self.stop_flag = True
        codes = {}
        for d in getattr(self, "ctrl", {}).values():
            codes[d.name] = d.term(20)
        for p in ("api_proxy", "pg_proxy"):
            if hasattr(self, p):
                getattr(self, p).stop()
        for d in ("agent", "local"):
            if hasattr(self, d):
                codes[getattr(self, d).name] = getattr(self, d).term(30)
        if hasattr(self, "pg"):
            self.pg.stop()
        return codes

    def unmount(self):
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", m], check=False)
        self.mounts = []
