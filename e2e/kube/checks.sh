# The check helpers of the e2e/kube suites (api.sh, helm.sh, realnode.sh):
# each counts into pass/fail and prints one line per check; the suite ends
# with `echo "$pass passed, $fail failed"`. Sourced, never run.
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
# bad NAME [DETAIL...]: a failed check, with its details indented below it.
bad() {
	fail=$((fail + 1))
	echo "FAIL $1"
	shift
	[[ $# -gt 0 ]] && printf '     %s\n' "$@"
}
# expect NAME PATTERN CMD...: CMD's stdout+stderr must match the extended regex.
expect() {
	local name=$1 pat=$2 out
	shift 2
	out=$("$@" 2>&1)
	if printf '%s' "$out" | grep -Eq -- "$pat"; then ok "$name"; else bad "$name" "want /$pat/" "got: $(printf '%s' "$out" | head -c 600)"; fi
}
# expect_empty NAME CMD...: CMD must succeed and print nothing.
expect_empty() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1) && [[ -z "$out" ]]; then ok "$name"; else bad "$name" "want empty output" "got: $(printf '%s' "$out" | head -c 600)"; fi
}
