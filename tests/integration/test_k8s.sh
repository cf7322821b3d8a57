#!/bin/bash
# The Kubernetes manifests of deploy/kubernetes/: every field msrun relies on
# is present and consistent, and each pod's command line, run through
# `msrun --dry_run` with the environment the pod would have
# (JOB_COMPLETION_INDEX, the Secret's token), resolves as the manifest means.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
# train_gpt (the manifests' program) is found beside msrun
python3 "$(dirname "$0")/k8s_manifests.py" "$MSRUN" "$root/deploy/kubernetes" "$TMP" \
    >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "the manifests"; }
cat "$TMP/out"
grep -q "^ok   indexed-job.yaml" "$TMP/out" || fail "the Indexed Job was checked"
grep -q "^ok   jobset.yaml" "$TMP/out" || fail "the JobSet was checked"
no_leftovers "--dry_run"

# A one-node job inside any pod runs as on any machine: the pod's
# KUBERNETES_SERVICE_HOST and a MASTER_* left in the image do not make it
# one node of a multi-node job (which would wait for a token).
for e in "" "JOB_COMPLETION_INDEX=0"; do
    CODE=0
    env KUBERNETES_SERVICE_HOST=10.96.0.1 MASTER_ADDR=10.9.9.9 MASTER_PORT=1234 $e \
        MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 "$MSRUN" --worker_num=2 "$WORKER" env \
        >"$TMP/out" 2>"$TMP/err" || CODE=$?
    expect_code 0 "a one-node job in a pod (${e:-no index})"
    expect_in "ENV 1 MSR_WORLD_SIZE=2" "$TMP/out" "both workers ran (${e:-no index})"
    expect_not_in "10.9.9.9" "$TMP/out" "the pod's MASTER_ADDR is not used (${e:-no index})"
done
no_leftovers "a one-node job in a pod"
ok "a one-node job in a pod with MASTER_ADDR and MASTER_PORT set runs standalone"
