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
