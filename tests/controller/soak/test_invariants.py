#!/usr/bin/python3
"""The soak's searcher-replay bookkeeping (e2e/soak/invariants.py): where a
watch gap cuts an experiment's history of searcher states, and that the
replay covers every stretch between the cuts (each from its first state)
and no transition across one."""
import os
import sys
import types

sys.path.insert(0, os.path.join(os.environ.get("KD_SRC", "."), "e2e", "soak"))
import invariants  # noqa: E402

PASSED = FAILED = 0


def check(what, ok):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"ok - {what}")
    else:
        FAILED += 1
        print(f"FAIL - {what}")


def cm(name, n):
    """A searcher ConfigMap whose state is state number n."""
    return {"metadata": {"name": name}, "data": {"state.json": '{"n": %d}' % n}}


def main():
    # stretches(n, breaks): a table.
    for n, breaks, want in [
        (0, set(), []),
        (1, set(), [(0, 1)]),
        (5, set(), [(0, 5)]),
        (5, {2, 4}, [(0, 2), (2, 4), (4, 5)]),
        (5, {0, 5, 9}, [(0, 5)]),  # out of range: no cut
        (3, {1, 2}, [(0, 1), (1, 2), (2, 3)]),
    ]:
        got = invariants.stretches(n, breaks)
        check(f"stretches({n}, {sorted(breaks)}) = {want} (got {got})", got == want)

    inv = invariants.Invariants(types.SimpleNamespace(kube=None, T="/tmp"), None, None,
                                lambda *a: None, "kdet-search")
    a, b = "a-searcher", "b-searcher"
    inv._on_cm("ADDED", cm(a, 0))
    inv._on_cm("MODIFIED", cm(a, 1))
    inv._on_cm("MODIFIED", cm(a, 1))  # the same state again: not a new one
    inv._on_cm("ADDED", cm(b, 0))
    inv._on_cm("MODIFIED", cm(b, 1))
    check("two states each, no cut yet", [len(inv.cm_hist[k]) for k in (a, b)] == [2, 2]
          and not inv.cm_breaks[a] and not inv.cm_breaks[b])
    # A 410: the watch relists. a changed meanwhile (versions may be lost), b did not.
    inv.cm_gap |= set(inv.cm_hist)
    inv._on_cm("ADDED", cm(a, 3), relist=True)
    inv._on_cm("ADDED", cm(b, 1), relist=True)
    check("a's first state after the gap starts a stretch", inv.cm_breaks[a] == {2})
    check("b, unchanged over the gap, is not cut", not inv.cm_breaks[b] and b not in inv.cm_gap)
    inv._on_cm("MODIFIED", cm(a, 4))
    inv._on_cm("MODIFIED", cm(b, 2))
    check("the states after that follow on", inv.cm_breaks[a] == {2} and not inv.cm_breaks[b])
    # A relist without a 410 (a watch that reconnected from scratch) cuts too.
    inv._on_cm("ADDED", cm(b, 5), relist=True)
    check("a relist that brings a new state cuts", inv.cm_breaks[b] == {3})
    # Another experiment seen first in a gap's relist has nothing to cut.
    inv.cm_gap.add("c-searcher")
    inv._on_cm("ADDED", cm("c-searcher", 0), relist=True)
    check("a first state is never a cut", not inv.cm_breaks["c-searcher"])

    # final_replay over the stretches, with the kdet-search replay recorded instead of run.
    calls = []

    def fake_replay(search, hist, T):
        calls.append([s["n"] for s in hist])
        return "the replay's own finding" if hist[-1]["n"] == 99 else None

    real, invariants.replay = invariants.replay, fake_replay
    try:
        n, nseg, ntrans, ngap, skipped = inv.final_replay()
        check(f"each stretch of two states or more is replayed from its own start ({calls})",
              calls == [[0, 1], [3, 4], [0, 1, 2]])
        check(f"2 experiments replayed (c has one state), 3 stretches, 4 transitions, 2 gaps "
              f"({n}, {nseg}, {ntrans}, {ngap})", (n, nseg, ntrans, ngap) == (2, 3, 4, 2)
              and not skipped)
        check("no violation", not inv.violations)
        inv._on_cm("MODIFIED", cm(a, 99))
        calls.clear()
        inv.final_replay()
        check("a stretch that does not replay is a violation naming its states",
              any(v[0] == "searcher_replay" and "a-searcher: states 2..4" in v[1]
                  for v in inv.violations))
        # An experiment skipped for a non-finite metric counts none of its transitions.
        inv2 = invariants.Invariants(types.SimpleNamespace(kube=None, T="/tmp"), None, None,
                                     lambda *a: None, "kdet-search")
        for n_ in (0, 1):
            inv2._on_cm("MODIFIED", cm("d-searcher", n_))
        inv2.cm_gap.add("d-searcher")
        for n_ in (77, 78):
            inv2._on_cm("MODIFIED", cm("d-searcher", n_))
        invariants.replay = lambda search, hist, T: "skip" if hist[0]["n"] == 77 else None
        n, nseg, ntrans, ngap, skipped = inv2.final_replay()
        check(f"a skipped experiment counts no stretch or transition ({n}, {nseg}, {ntrans}, "
              f"{skipped})", (n, nseg, ntrans) == (0, 0, 0) and skipped == [
                  "d-searcher (a non-finite metric)"])
    finally:
        invariants.replay = real
    print(f"{PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
