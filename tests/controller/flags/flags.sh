#!/usr/bin/env bash
# kdet-controller's command line: --idle-release-after takes whole seconds
# from 0 to 86400 and names itself in the error for anything else (exit 2,
# before any connection); a valid value is accepted (the next bad flag is
# the one reported), also when $KDET_IDLE_RELEASE_AFTER is invalid.
set -u
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../../.." && pwd)}
KD_BUILD=${KD_BUILD:-$KD_SRC/build}
ctrl=$KD_BUILD/bin/kdet-controller
passed=0
failed=0
check() {
    if [ "$1" = 0 ]; then
        passed=$((passed + 1))
        echo "ok - $2"
    else
        failed=$((failed + 1))
        echo "FAIL - $2"
    fi
}
# refused VALUE: exit 2 and an error naming the flag and the value.
refused() {
    local out rc
    out=$(timeout 10 "$ctrl" --idle-release-after "$1" 2>&1)
    rc=$?
    [ $rc = 2 ] && echo "$out" | head -1 | grep -qF -- "--idle-release-after=$1: expected whole seconds from 0 to 86400"
    check $? "--idle-release-after '$1' refused (rc $rc): $(echo "$out" | head -1)"
}
for v in -1 86401 5x 1.5 "" " 5" abc 99999999999999999999; do refused "$v"; done
# accepted VALUE: parsing goes on to the next (bad) flag.
accepted() {
    local out
    out=$(KDET_IDLE_RELEASE_AFTER=bogus timeout 10 "$ctrl" --idle-release-after "$1" --log-level nope 2>&1)
    echo "$out" | head -1 | grep -qF -- "--log-level=nope"
    check $? "--idle-release-after $1 accepted: $(echo "$out" | head -1)"
}
for v in 0 5 86400; do accepted "$v"; done
out=$(timeout 10 "$ctrl" --idle-release-after=7 --log-level=nope 2>&1)
echo "$out" | head -1 | grep -qF -- "--log-level=nope"
check $? "--idle-release-after=7 (one argument) accepted"
out=$(timeout 10 "$ctrl" --idle-release-after 2>&1)
echo "$out" | head -1 | grep -qF -- "--idle-release-after needs a value"
check $? "--idle-release-after without a value: $(echo "$out" | head -1)"
"$ctrl" --help | grep -q -- "--idle-release-after SECONDS"
check $? "--help lists --idle-release-after"
grep -q -- '`--idle-release-after SECONDS`' "$KD_SRC/docs/controller.md"
check $? "docs/controller.md's flags table has --idle-release-after"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
