#!/usr/bin/env bash
# The priority scheduler's queue changed live: while a 4-GPU trial holds the
# node, three queued experiments (a, b, c, created in that order) are
# reordered by a priority change, by kdet.io/ahead-of / behind-of
# annotations, and moved to another resource pool and back; each change
# shows in which trial heads the queue (its Scheduled message says what it
# waits for, the others are "queued behind"), and the node, once free,
# runs them in the final order (b, a behind b, then c).
. "$(dirname "$0")/lib.sh"
trap 'finish; exit $?' EXIT
start_local 4 || exit 1
start_ctrl --preemption off

experiment hold '  entrypoint: sh -c "sleep 600"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 4}'
check "the 4-GPU trial holds the node" wait_for 30 n_is 1 running_pods kdet.io/experiment=hold
for e in a b c; do
    experiment "$e" '  entrypoint: sh -c "sleep 1; exit 0"
  hyperparameters: {x: 1}
  searcher: {name: single, metric: loss, max_length: {batches: 10}}
  resources: {slots_per_trial: 4}'
    sleep 1.1 # creation times (whole seconds) set the order
done

msg() { field trial "$1" '{.status.conditions[?(@.type=="Scheduled")].message}'; }
# head T: T heads the queue (waits for GPUs) and the other two queued trials are behind it.
head_is() {
    local t
    case "$(msg "$1")" in "waiting for 4 GPUs"*) ;; *) return 1 ;; esac
    for t in a-1 b-1 c-1; do
        [ "$t" = "$1" ] && continue
        [ "$(field trial "$t" '{.spec.resources.resourcePool}')" = default ] || continue
        case "$(msg "$t")" in "queued behind"*) ;; *) return 1 ;; esac
    done
}
check "creation order: a heads the queue" wait_for 30 head_is a-1
echo "# b-1: $(msg b-1)"

kubectl patch exp c --type=merge -p '{"spec":{"resources":{"priority":10}}}' >/dev/null
check "priority 10 copied to c's queued trial" wait_for 30 n_is 10 field trial c-1 '{.spec.resources.priority}'
check "c (priority 10) now heads the queue" wait_for 30 head_is c-1

kubectl patch exp c --type=merge -p '{"spec":{"resources":{"priority":42}}}' >/dev/null
check "priority back to 42: a heads the queue again" wait_for 30 head_is a-1
kubectl annotate exp c kdet.io/ahead-of=a >/dev/null
check "c ahead-of a: c heads the queue" wait_for 30 head_is c-1
kubectl annotate exp c kdet.io/ahead-of- >/dev/null
kubectl annotate exp a kdet.io/behind-of=b >/dev/null
check "ahead-of removed and a behind-of b: b heads the queue" wait_for 30 head_is b-1

kubectl patch exp b --type=merge -p '{"spec":{"resources":{"resource_pool":"other"}}}' >/dev/null
check "pool copied to b's queued trial" wait_for 30 n_is other field trial b-1 '{.spec.resources.resourcePool}'
check "b in pool other is Unschedulable there" wait_for 30 eval \
    '[ "$(field trial b-1 "{.status.conditions[?(@.type==\"Scheduled\")].reason}")" = Unschedulable ]'
echo "# b-1: $(msg b-1)"
check "its message names the pool" eval 'case "$(msg b-1)" in *"resource pool other"*) true ;; *) false ;; esac'
check "with b gone from the pool, a (just behind b) heads it" wait_for 30 head_is a-1
kubectl patch exp b --type=merge -p '{"spec":{"resources":{"resource_pool":"default"}}}' >/dev/null
check "b back in pool default heads the queue" wait_for 30 head_is b-1

log "the holder ends: the queue runs in order b, a, c"
kubectl patch exp hold --type=merge -p '{"spec":{"canceled":true}}' >/dev/null
for e in a b c; do check "$e COMPLETED" wait_for 60 exp_state_is "$e" COMPLETED; done
order=$(grep 'msg="trial admitted"' "$T/ctrl.log" | sed -n 's/.*trial=default\/\([abc]\)-1 .*/\1/p' | tr -d '\n')
echo "# admission order: $order"
check "admitted in the order b, a, c" test "$order" = bac
check "hold CANCELED" wait_for 30 exp_state_is hold CANCELED
check "no pods left" wait_for 20 no_pods
