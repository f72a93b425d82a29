#!/usr/bin/env bash
# helm/kdet with the real helm (.deps/helm, from `make deps`): lint; render
# with the defaults and with tests/helm/values-full.yaml (every value set),
# and check what reaches the objects; values.schema.json and the templates'
# `required` refuse bad values with a message naming them; the chart's
# crds/ are the tree's crds/. e2e/kube/helm.sh applies the renderings to a
# real API server (make e2e-real).
set -u
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$KD_SRC" || exit 1
HELM=${HELM:-$KD_SRC/.deps/helm/helm}
if [[ ! -x "$HELM" ]]; then
	echo "FAIL - helm missing at $HELM (make deps installs it)"
	echo "0 passed, 1 failed"
	exit 1
fi
export HELM
exec /usr/bin/python3 - <<'PY'
import os, re, subprocess, sys, yaml
HELM = os.environ["HELM"]
passed = failed = 0
def check(ok, what):
    global passed, failed
    if ok: passed += 1; print("ok -", what)
    else: failed += 1; print("FAIL -", what)

def helm(*args):
    p = subprocess.run([HELM, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr

def render(*extra):
    rc, out, err = helm("template", "kdet", "helm/kdet", "--namespace", "kdet", *extra)
    if rc != 0:
        print(err)
        return None
    return [d for d in yaml.safe_load_all(out) if d]

def find(objs, kind, name=None):
    for o in objs or []:
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name):
            return o
    return None

rc, out, err = helm("lint", "--strict", "helm/kdet")
check(rc == 0, "helm lint --strict passes" + ("" if rc == 0 else ": " + out + err))

# ---- defaults
objs = render()
check(objs is not None, "renders with the default values")
kinds = sorted(o["kind"] for o in objs or [])
for k in ["Deployment", "StatefulSet", "Service", "Secret", "ServiceAccount", "ClusterRole",
          "ClusterRoleBinding", "Role", "RoleBinding", "PriorityClass"]:
    check(k in kinds, "defaults render a %s" % k)
dep = find(objs, "Deployment", "kdet-controller")
pod = dep["spec"]["template"]["spec"] if dep else {}
c = (pod.get("containers") or [{}])[0]
args = c.get("args", [])
chart = yaml.safe_load(open("helm/kdet/Chart.yaml"))
check(c.get("image") == "kdet-controller:%s" % chart["appVersion"], "the image tag defaults to appVersion (%s)" % c.get("image"))
check(c.get("imagePullPolicy") == "IfNotPresent", "imagePullPolicy IfNotPresent")
check(dep and dep["spec"]["replicas"] == 2 and "--leader-elect=on" in args, "2 replicas with leader election")
check("--image=kdet-trainer:%s" % chart["appVersion"] in args, "the trial image defaults to kdet-trainer:<appVersion>")
check("--trial-run-as-user=65532" in args, "trial pods run as non-root by default")
check("--slot-type=auto" in args and "--cpu-per-slot=1" in args and not any(a.startswith("--memory-per-slot") for a in args)
      and not any(a.startswith("--max-slots-per-pod") for a in args),
      "slots: auto, 1 CPU per CPU slot, no memory request, no pod size limit by default")
check(not any(a.startswith("--allow-host-devices") for a in args), "no host devices by default")
check(not any(a.startswith("--default-checkpoint-storage") for a in args), "no default storage unless asked")
sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
check(psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is True, "controller runAsNonRoot")
check(sc.get("readOnlyRootFilesystem") is True, "controller readOnlyRootFilesystem")
check(sc.get("capabilities") == {"drop": ["ALL"]}, "controller drops all capabilities")
check(sc.get("allowPrivilegeEscalation") is False, "no privilege escalation")
check(psc.get("seccompProfile") == {"type": "RuntimeDefault"} and sc.get("seccompProfile") == {"type": "RuntimeDefault"}, "seccomp RuntimeDefault")
for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
    check(c.get(probe, {}).get("httpGet", {}).get("path") == path, "%s on %s" % (probe, path))
ann = dep["spec"]["template"]["metadata"].get("annotations", {}) if dep else {}
check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics", "Prometheus scrape annotations")
env = {e["name"]: e for e in c.get("env", [])}
check(env.get("KDET_DATABASE_URL", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "kdet-database", "database URL from the chart's Secret")
check("optional" not in env.get("KDET_DATABASE_URL", {}).get("valueFrom", {}).get("secretKeyRef", {}), "the database Secret is not optional")
tok = find(objs, "Secret", "kdet-user-token")
check(tok is not None and len(tok["data"]["token"]) >= 40, "a user token is generated")
db = find(objs, "Secret", "kdet-database")
import base64
url = base64.b64decode(db["data"]["url"]).decode() if db else ""
pw = base64.b64decode(db["data"]["password"]).decode() if db else ""
check(len(pw) >= 32 and url == "postgresql://kdet:%s@kdet-postgresql.kdet.svc:5432/kdet?sslmode=disable" % pw, "the database URL carries the generated password")
sts = find(objs, "StatefulSet", "kdet-postgresql")
check(sts and sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "8Gi", "PostgreSQL keeps its data on an 8Gi PersistentVolumeClaim")
check(sts and sts["spec"]["template"]["spec"]["securityContext"].get("runAsNonRoot") is True, "PostgreSQL runs as non-root")
# ---- TLS: a CA and a certificate for the Service's names, mounted; probes over HTTPS
import subprocess as sp
tls = find(objs, "Secret", "kdet-api-tls")
check(tls is not None and tls["type"] == "kubernetes.io/tls" and sorted(tls["data"]) == ["ca.crt", "tls.crt", "tls.key"],
      "a TLS Secret kdet-api-tls (tls.crt, tls.key, ca.crt) is generated")
def x509(pem, *args):
    return sp.run(["openssl", "x509", "-noout", *args], input=pem, capture_output=True, text=True).stdout
if tls:
    crt, ca = (base64.b64decode(tls["data"][k]).decode() for k in ("tls.crt", "ca.crt"))
    text = x509(crt, "-text")
    for name in ("DNS:kdet-controller.kdet.svc", "DNS:kdet-controller.kdet.svc.cluster.local", "DNS:kdet-controller", "IP Address:127.0.0.1"):
        check(name in text, "the API certificate names %s" % name)
    with open("/tmp/kd-chart-ca.%d.pem" % os.getpid(), "w") as f:
        f.write(ca)
    v = sp.run(["openssl", "verify", "-CAfile", f.name], input=crt, capture_output=True, text=True)
    os.unlink(f.name)
    check(v.returncode == 0, "the certificate is signed by ca.crt (%s)" % (v.stdout + v.stderr).strip())
    check("CA:TRUE" in x509(ca, "-text"), "ca.crt is a CA")
for a in ("--tls-cert-file=/etc/kdet-tls/tls.crt", "--tls-key-file=/etc/kdet-tls/tls.key", "--tls-ca-file=/etc/kdet-tls/ca.crt",
          "--controller-url=https://kdet-controller.kdet.svc:8080"):
    check(a in args, "defaults: %s" % a)
check("--authz=namespaces" in args, "defaults: --authz=namespaces")
check(not any(o.get("kind") == "ClusterRole" and "authz" in o["metadata"]["name"] for o in objs),
      "defaults: no SubjectAccessReview right")
mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
vols = {v["name"]: v for v in pod.get("volumes", [])}
check(mounts.get("api-tls", {}).get("mountPath") == "/etc/kdet-tls" and mounts["api-tls"].get("readOnly") is True and
      vols.get("api-tls", {}).get("secret", {}).get("secretName") == "kdet-api-tls", "the TLS Secret is mounted read-only at /etc/kdet-tls")
for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
    check(c.get(probe, {}).get("httpGet", {}).get("scheme") == "HTTPS", "%s over HTTPS" % probe)
check(ann.get("prometheus.io/scheme") == "https", "Prometheus scrapes over HTTPS")
extra = render("--set", "api.tls.extraDnsNames={kdet.example.org}", "--set", "api.tls.extraIPs={192.0.2.7}")
et = find(extra, "Secret", "kdet-api-tls")
etext = x509(base64.b64decode(et["data"]["tls.crt"]).decode(), "-text") if et else ""
check("DNS:kdet.example.org" in etext and "IP Address:192.0.2.7" in etext, "extraDnsNames and extraIPs reach the certificate")
objs2 = render()
tok2 = find(objs2, "Secret", "kdet-user-token")
check(tok and tok2 and tok["data"]["token"] != tok2["data"]["token"], "each fresh render generates a new token (lookup keeps it on upgrade)")
tls2 = find(objs2, "Secret", "kdet-api-tls")
check(tls and tls2 and tls["data"]["ca.crt"] != tls2["data"]["ca.crt"], "each fresh render generates a new CA (lookup keeps it on upgrade)")
svc = find(objs, "Service", "kdet-controller")
check(svc and svc["spec"]["type"] == "ClusterIP" and svc["spec"]["ports"][0]["port"] == 8080, "the Service is ClusterIP on 8080")
check(len([o for o in objs if o["kind"] == "PriorityClass"]) == 3, "three PriorityClasses")
for o in objs:
    if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "PriorityClass"):
        continue
    check(o["metadata"].get("namespace") == "kdet", "%s/%s is in the release namespace" % (o["kind"], o["metadata"]["name"]))

# ---- every value set
full = yaml.safe_load(open("tests/helm/values-full.yaml"))
defaults = yaml.safe_load(open("helm/kdet/values.yaml"))
def leaves(d, pre=""):
    out = set()
    for k, v in d.items():
        if isinstance(v, dict) and v and k not in ("requests", "limits", "nodeSelector", "affinity"):
            out |= leaves(v, pre + k + ".")
        else:
            out.add(pre + k)
    return out
missing = leaves(defaults) - leaves(full)
check(not missing, "values-full.yaml sets every value of values.yaml (missing: %s)" % sorted(missing))
objs = render("-f", "tests/helm/values-full.yaml")
check(objs is not None, "renders with every value set")
dep = find(objs, "Deployment", "kdet-controller")
pod = dep["spec"]["template"]["spec"] if dep else {}
c = (pod.get("containers") or [{}])[0]
args = c.get("args", [])
want_args = ["--scheduler=fair_share", "--preemption=off", "--workers=8", "--gang-scheduler=volcano",
             "--gang-queue=research", "--controller-url=https://kdet-controller.kdet.svc:9090",
             "--api-listen=0.0.0.0:9090", "--image=registry.example/kdet-trainer:9.9.9",
             "--namespace=ml", "--idle-release-after=60", "--resync=45", "--kube-api-qps=20",
             "--kube-api-burst=40", "--trial-run-as-user=1000", "--leader-elect=on",
             "--slot-type=cpu", "--cpu-per-slot=2500m", "--memory-per-slot=4Gi", "--max-slots-per-pod=2",
             "--allow-host-devices=on", "--default-checkpoint-storage=/etc/kdet/checkpoint-storage.json", "--priority-classes=off",
             "--authz=kubernetes"]
for a in want_args:
    check(a in args, "full values: %s" % a)
check(c.get("image") == "registry.example/kdet-controller:9.9.9" and c.get("imagePullPolicy") == "Always", "full values: image")
check(dep["spec"]["replicas"] == 3, "full values: replicas")
check(pod.get("imagePullSecrets") == [{"name": "regcred"}], "full values: imagePullSecrets")
check(pod.get("nodeSelector") == {"kdet.io/control": "true"} and pod.get("tolerations", [{}])[0].get("key") == "dedicated", "full values: nodeSelector and tolerations")
env = {e["name"]: e for e in c.get("env", [])}
check(env["KDET_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "my-db", "key": "dsn"}, "full values: external database Secret")
check(env["KDET_USER_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "my-token", "full values: existing token Secret")
check(env["KDET_LOG_LEVEL"]["value"] == "debug", "full values: logLevel")
check(find(objs, "StatefulSet") is None and find(objs, "Secret", "kdet-database") is None, "external database: no StatefulSet, no generated database Secret")
check(find(objs, "Secret", "kdet-user-token") is None, "existing token Secret: none generated")
check(find(objs, "Secret", "kdet-api-tls") is None, "existing TLS Secret: none generated")
vols = {v["name"]: v for v in pod.get("volumes", [])}
check(vols.get("api-tls", {}).get("secret", {}).get("secretName") == "my-tls" and
      {"key": "tls.crt", "path": "ca.crt"} in vols["api-tls"]["secret"].get("items", []),
      "full values: the existing TLS Secret, its CA from caKey (tls.crt)")
check(find(objs, "PriorityClass") is None, "priorityClasses.create=false: none")
sar = [o for o in objs if o.get("kind") == "ClusterRole" and o["metadata"]["name"].startswith("kdet-controller-authz-")]
check(len(sar) == 1 and {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]} in sar[0]["rules"],
      "api.authz=kubernetes: the controller may create SubjectAccessReviews")
adm = [o for o in objs if o.get("kind") == "ClusterRoleBinding" and o["metadata"]["name"].startswith("kdet-admins-")]
check(len(adm) == 1 and adm[0]["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kdet:admins"}],
      "api.authz=kubernetes: kdet:admins bound to every kdet.io resource")
svc = find(objs, "Service", "kdet-controller")
check(svc["spec"]["type"] == "NodePort" and svc["spec"]["ports"][0].get("nodePort") == 30090, "full values: NodePort service")
cm = find(objs, "ConfigMap", "kdet-defaults")
import json
cs = json.loads(cm["data"]["checkpoint-storage.json"]) if cm else {}
check(cs == {"type": "s3", "bucket": "ckpts", "prefix": "kdet", "endpoint_url": "http://s3.example:9000",
             "region": "eu-west-1", "credentials_secret": "s3-keys"}, "full values: the default s3 storage (%s)" % cs)
check(c["resources"]["limits"]["memory"] == "512Mi", "full values: resources")
shared = render("--set", "checkpointStorage.type=shared_fs", "--set", "checkpointStorage.sharedFs.hostPath=/data/ck",
                "--set", "checkpointStorage.sharedFs.storagePath=team")
dep = find(shared, "Deployment")
cm = find(shared, "ConfigMap", "kdet-defaults")
check(cm and json.loads(cm["data"]["checkpoint-storage.json"]) == {"type": "shared_fs", "host_path": "/data/ck", "storage_path": "team"}, "shared_fs default storage")
vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
check(vols.get("checkpoints", {}).get("hostPath", {}).get("path") == "/data/ck", "shared_fs: the controller mounts host_path (for checkpoint GC)")
db = render("--set", "database.internal.storage.storageClassName=local-path", "--set", "replicas=1")
sts = find(db, "StatefulSet")
check(sts["spec"]["volumeClaimTemplates"][0]["spec"].get("storageClassName") == "local-path", "storageClassName reaches the claim")
check("--leader-elect=off" in find(db, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"], "1 replica: no leader election")
check(find(db, "Lease") is None, "1 replica: no Lease")
lease = find(objs, "Lease", "kdet-controller")
check(lease is not None and "spec" not in lease, "2 replicas: the chart makes the Lease (so uninstall removes it), with no spec of its own")
import base64
key = find(objs, "Secret", "kdet-controller-key")
kv = base64.b64decode(key["data"]["key"]).decode() if key else ""
check(len(kv) == 64 and kv.isalnum(), "the trial-token key Secret kdet-controller-key: 64 random characters (%d)" % len(kv))
fulldb = render("-f", "tests/helm/values-full.yaml", "--set", "database.mode=internal")
fsts = find(fulldb, "StatefulSet") or {}
fpod = fsts.get("spec", {}).get("template", {}).get("spec", {})
check(fpod.get("nodeSelector") == {"kdet.io/db": "true"} and
      fpod.get("tolerations") == [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}],
      "full values, internal database: PostgreSQL's nodeSelector and tolerations")

# ---- bad values, with a message naming them
for setv, want in [("replicas=0", "/replicas"), ("controller.scheduler=fifo", "/controller/scheduler"),
                   ("checkpointStorage.type=nfs", "/checkpointStorage/type"), ("controller.workers=100", "/controller/workers"),
                   ("api.port=70000", "/api/port"), ("nosuchvalue=1", "nosuchvalue"),
                   ("controller.logLevel=loud", "/controller/logLevel"),
                   ("controller.slotType=tpu", "/controller/slotType"), ("controller.cpuPerSlot=lots", "/controller/cpuPerSlot"),
                   ("controller.maxSlotsPerPod=-1", "/controller/maxSlotsPerPod"),
                   ("checkpointStorage.sharedFs.hostPath=relative", "/checkpointStorage/sharedFs/hostPath"),
                   ("api.tls.extraIPs={not-an-ip}", "/api/tls/extraIPs"), ("api.tls.caKey=", "/api/tls/caKey")]:
    rc, out, err = helm("template", "kdet", "helm/kdet", "--set", setv)
    check(rc != 0 and want in err, "schema refuses %s, naming %s (%s)" % (setv, want, err.strip().splitlines()[-1] if err.strip() else "no error"))
for setv, want in [(["database.mode=external"], "database.external.secretName is required"),
                   (["checkpointStorage.type=s3"], "checkpointStorage.s3.bucket is required"),
                   (["checkpointStorage.type=shared_fs"], "checkpointStorage.sharedFs.hostPath is required")]:
    a = []
    for s in setv: a += ["--set", s]
    rc, out, err = helm("template", "kdet", "helm/kdet", *a)
    check(rc != 0 and want in err, "refuses %s: %s" % (" ".join(setv), want))

# ---- CRDs
for f in ("experiments.yaml", "trials.yaml"):
    check(open("crds/" + f).read() == open("helm/kdet/crds/" + f).read(), "helm/kdet/crds/%s is crds/%s" % (f, f))
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
