#!/usr/bin/env bash
# manifests/ and helm/kdet: every file parses as YAML; the ClusterRole grants
# every (resource, verb) the controller's code calls (found in
# controller/*.c) and nothing beyond the documented set; the chart's RBAC
# template carries the same rules as manifests/rbac.yaml.
set -u
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$KD_SRC" || exit 1
exec /usr/bin/python3 - <<'PY'
import glob, re, sys, yaml
passed = failed = 0
def check(ok, what):
    global passed, failed
    if ok: passed += 1; print("ok -", what)
    else: failed += 1; print("FAIL -", what)

docs = {}
for f in sorted(glob.glob("manifests/*.yaml")):
    try:
        docs[f] = [d for d in yaml.safe_load_all(open(f)) if d]
        check(True, f + " parses")
    except Exception as e:
        check(False, "%s parses: %s" % (f, e))

def rules(objs):
    got = set()
    for d in objs:
        if d.get("kind") in ("ClusterRole", "Role"):
            for r in d["rules"]:
                for g in r["apiGroups"]:
                    for res in r["resources"]:
                        for v in r["verbs"]:
                            got.add((g, res, v))
    return got

granted = rules(docs.get("manifests/rbac.yaml", []))
gvr = {"CONFIGMAPS": ("", "configmaps"), "PODS": ("", "pods"), "SERVICES": ("", "services"),
       "TRIALS": ("kdet.io", "trials"), "EXPERIMENTS": ("kdet.io", "experiments"),
       "TASKS": ("kdet.io", "tasks"),
       "NODES": ("", "nodes"), "LEASES": ("coordination.k8s.io", "leases")}
verbs = {"create": "create", "delete": "delete", "patch": "patch", "update": "update",
         "list": "list", "get": "get"}
src = "".join(open(f).read() for f in glob.glob("controller/*.c"))
calls = set(re.findall(r"kd_k8s_(create|delete|patch|update|list|get)\(c->client, &KD_K8S_([A-Z]+)", src))
# The API's own calls (controller/api/*.c, on its client a->o.k8s or q->api->o.k8s)
api_src = "".join(open(f).read() for f in glob.glob("controller/api/*.c"))
calls |= set(re.findall(r"kd_k8s_(create|delete|patch|update|list|get)\([a-z>-]*\bo\.k8s, &KD_K8S_([A-Z]+)", api_src))
check(len(calls) >= 8, "found the controller's API calls (%d)" % len(calls))
for verb, res in sorted(calls):
    g, r = gvr[res]
    check((g, r, verbs[verb]) in granted, "RBAC grants %s on %s" % (verb, r))
# status patches go through kd_ctrl_patch_status; informers list and watch
for need in [("kdet.io", "experiments/status", "patch"), ("kdet.io", "trials/status", "patch"),
             ("kdet.io", "tasks/status", "patch"),
             ("coordination.k8s.io", "leases", "update"), ("", "events", "create")] + \
            [(g, r, v) for (g, r) in [("kdet.io", "experiments"), ("kdet.io", "trials"), ("kdet.io", "tasks"), ("", "pods"), ("", "nodes")]
             for v in ("list", "watch")]:
    check(need in granted, "RBAC grants %s on %s" % (need[2], need[1]))
check({v for g, r, v in granted if (g, r) == ("", "secrets")} == {"get", "create", "delete"},
      "secrets: only get, create and delete (token key and per-trial tokens; never list or watch)")
for bad in [("", "pods/exec"), ("", "*")]:
    check(not any(x[:2] == bad for x in granted), "no access to %s" % bad[1])
# The gang backends' group objects (controller/gang*.c, through c->o.gang->gvr): Volcano
# PodGroups are created, read and deleted; Kueue Workloads only read.
gang = {(g, r, v) for g, r, v in granted if g in ("scheduling.volcano.sh", "kueue.x-k8s.io")}
check(gang == {("scheduling.volcano.sh", "podgroups", v) for v in ("get", "create", "delete")} |
      {("kueue.x-k8s.io", "workloads", "get")},
      "batch schedulers: podgroups get/create/delete, workloads get, nothing more")
gsrc = src + "".join(open(f).read() for f in glob.glob("controller/gang*.[ch]"))
for verb in ("create", "get", "delete"):
    check(re.search(r"kd_k8s_%s\(c->client, c->o\.gang->gvr" % verb, gsrc) is not None,
          "the controller calls %s on the gang backend's group object" % verb)
check(not any(v in ("*", "deletecollection", "escalate", "bind") for _, _, v in granted), "no wildcard or escalation verbs")
tmpl = open("helm/kdet/templates/rbac.yaml").read()
tmpl = re.sub(r"\{\{[^}]*\}\}", "x", tmpl)
check(rules([d for d in yaml.safe_load_all(tmpl) if d]) == granted, "chart RBAC equals manifests/rbac.yaml")
# --authz kubernetes: the API posts SubjectAccessReviews (controller/api/authz.c); that
# right is in its own file and chart template, applied only in that mode.
authz = rules(docs.get("manifests/rbac-authz-kubernetes.yaml", []))
check("authorization.k8s.io/v1/subjectaccessreviews" in api_src,
      "the API posts SubjectAccessReviews (found in controller/api)")
check(("authorization.k8s.io", "subjectaccessreviews", "create") in authz,
      "rbac-authz-kubernetes.yaml grants create on subjectaccessreviews")
check(not any(r == "subjectaccessreviews" for _, r, _ in granted),
      "rbac.yaml does not: only the kubernetes mode needs it")
atmpl = open("helm/kdet/templates/rbac-authz.yaml").read()
atmpl = re.sub(r"^\s*\{\{-?[^}]*\}\}\s*\n", "", atmpl, flags=re.M)  # the if and end lines
atmpl = re.sub(r"\{\{[^}]*\}\}", "x", atmpl)
check(rules([d for d in yaml.safe_load_all(atmpl) if d]) == authz,
      "chart's rbac-authz.yaml equals manifests/rbac-authz-kubernetes.yaml")
for f in ["helm/kdet/Chart.yaml", "helm/kdet/values.yaml"]:
    try: yaml.safe_load(open(f)); check(True, f + " parses")
    except Exception as e: check(False, "%s parses: %s" % (f, e))
dep = [d for d in docs.get("manifests/deployment.yaml", []) if d.get("kind") == "Deployment"]
args = dep[0]["spec"]["template"]["spec"]["containers"][0]["args"] if dep else []
check("--leader-elect=on" in args, "the Deployment runs with leader election")
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
