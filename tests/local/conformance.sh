#!/bin/sh
# The conformance suite (e2e/conformance/run.sh) against a fresh kdet-local.
unset KUBECONFIG
KD_LOCAL_BIN="$KD_BUILD/bin/kdet-local" exec "$KD_SRC/e2e/conformance/run.sh"
