#!/usr/bin/env python3
"""A stand-in for Volcano's scheduler, for tests on a cluster without Volcano.

Not Volcano: it only does what kdet relies on. Every half second it reads
the PodGroups (scheduling.volcano.sh/v1beta1) and the pods with
schedulerName "volcano" through kubectl, and for each PodGroup (by
priority class value, then age) binds its pods, all at once through the
pods/binding subresource, only when at least minMember pods exist and the
nodes' free nvidia.com/gpu take all of them; otherwise it binds none and
writes phase Pending with an Unschedulable condition saying why. A group
whose pods are bound gets phase Running. Runs until killed.
"""
import json
import subprocess
import sys
import time

GROUP_ANN = "scheduling.k8s.io/group-name"


def kubectl(*args, stdin=None):
    r = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:3])}: {r.stderr.strip()}")
    return r.stdout


def items(*args):
    return json.loads(kubectl("get", *args, "-A", "-o", "json"))["items"]


def gpus(pod):
    n = 0
    for c in pod["spec"].get("containers", []):
        res = c.get("resources", {})
        q = res.get("requests", {}).get("nvidia.com/gpu", res.get("limits", {}).get("nvidia.com/gpu", 0))
        n += int(q)
    return n


def live(pod):
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def set_status(pg, phase, running, unsched):
    old = pg.get("status", {})
    conds = []
    if unsched:
        conds.append({"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                      "message": unsched, "transitionID": "standin",
                      "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    if old.get("phase") == phase and old.get("running", 0) == running and \
            [c.get("message") for c in old.get("conditions", [])] == [c["message"] for c in conds]:
        return
    md = pg["metadata"]
    patch = {"status": {"phase": phase, "running": running, "conditions": conds}}
    kubectl("patch", "podgroup", md["name"], "-n", md["namespace"], "--subresource=status",
            "--type=merge", "-p", json.dumps(patch))
    print(f"podgroup {md['namespace']}/{md['name']} phase={phase} {unsched or ''}", flush=True)


def bind(pod, node):
    md = pod["metadata"]
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": md["name"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    kubectl("create", "--raw", f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}/binding",
            "-f", "-", stdin=json.dumps(body))
    print(f"bound {md['namespace']}/{md['name']} to {node}", flush=True)


def one_pass():
    nodes = items("nodes")
    pods = items("pods")
    groups = items("podgroups.scheduling.volcano.sh")
    prio = {p["metadata"]["name"]: p.get("value", 0) for p in items("priorityclasses")}
    free = {}
    for n in nodes:
        if n["spec"].get("unschedulable"):
            continue
        free[n["metadata"]["name"]] = int(n["status"].get("allocatable", {}).get("nvidia.com/gpu", 0))
    for p in pods:
        node = p["spec"].get("nodeName")
        if node in free and live(p):
            free[node] -= gpus(p)
    groups.sort(key=lambda g: (-prio.get(g["spec"].get("priorityClassName", ""), 0),
                               g["metadata"]["creationTimestamp"], g["metadata"]["name"]))
    for g in groups:
        md = g["metadata"]
        members = [p for p in pods if p["metadata"]["namespace"] == md["namespace"]
                   and p["metadata"].get("annotations", {}).get(GROUP_ANN) == md["name"]
                   and p["spec"].get("schedulerName") == "volcano"
                   and "deletionTimestamp" not in p["metadata"] and live(p)]
        waiting = [p for p in members if not p["spec"].get("nodeName")]
        bound = len(members) - len(waiting)
        want = int(g["spec"].get("minMember", 1))
        if not waiting:
            if members:
                set_status(g, "Running", bound, None)
            continue
        if len(members) < want:
            set_status(g, "Pending", bound, f"{len(waiting)}/{want} tasks in gang unschedulable: "
                       f"pod group is not ready, {len(members)} Pods, {want} minAvailable")
            continue
        # All or nothing: place every waiting pod on a copy of the free GPUs first.
        trial = dict(free)
        plan = []
        for p in waiting:
            need = gpus(p)
            fit = [n for n in sorted(trial, key=lambda n: trial[n]) if trial[n] >= need]
            if not fit:
                break
            trial[fit[0]] -= need
            plan.append((p, fit[0]))
        if len(plan) < len(waiting):
            set_status(g, "Pending", bound, f"{len(waiting)}/{len(members)} tasks in gang "
                       f"unschedulable: {len(waiting)} Insufficient nvidia.com/gpu")
            continue
        for p, node in plan:
            bind(p, node)
        free = trial
        set_status(g, "Running", len(members), None)


def main():
    while True:
        try:
            one_pass()
        except Exception as e:  # the API server may be starting or stopping: try again
            print(f"pass failed: {e}", file=sys.stderr, flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
