#!/usr/bin/env python3
"""Checks deploy/kubernetes/*.yaml: every field msrun relies on is present
and consistent, and the command each pod runs is accepted by
`msrun --dry_run` with the environment that pod would have, resolving to
the values the manifest means.

  k8s_manifests.py MSRUN DEPLOY_DIR TMPDIR
Prints 'ok ...' lines; exits 1 with 'FAIL ...' on the first problem."""
import os
import re
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("FAIL python3-yaml is missing (scripts/deps.sh test installs it)")
    sys.exit(1)

msrun, deploy, tmp = sys.argv[1:4]


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def need(cond, msg):
    if not cond:
        fail(msg)


def flags(cmd):
    """--name=value flags of msrun's command line, up to the program."""
    out = {}
    for a in cmd[1:]:
        if not a.startswith("--"):
            break
        need("=" in a, "flag %s takes its value after '=' (msrun's syntax)" % a)
        k, v = a[2:].split("=", 1)
        out[k.replace("-", "_")] = v
    return out


def dry_run(cmd, env_items, secret):
    """Runs the container's command through msrun --dry_run with the pod's
    environment; returns {name: (value, source)}."""
    env = {"PATH": os.path.dirname(msrun) + ":" + os.environ["PATH"],
           "KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOME": tmp}
    env.update(env_items)
    for e in secret.get("env", []):
        env[e["name"]] = e["value"]
    need(cmd[0] == "msrun", "the container runs msrun, not %s" % cmd[0])
    p = subprocess.run([msrun, "--dry_run"] + cmd[1:], env=env, capture_output=True,
                       text=True, timeout=60)
    need(p.returncode == 0, "msrun --dry_run %s: exit %d: %s" % (" ".join(cmd[1:]),
                                                                p.returncode, p.stderr))
    res = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^(\w+) = (\S+) \((\w+)(?:: (.*))?\)$", line)
        need(m, "--dry_run line %r is not 'name = value (source)'" % line)
        res[m.group(1)] = (m.group(2), m.group(3) + (": " + m.group(4) if m.group(4) else ""))
    return res


def secret_env(container, docs, tmpdir):
    """The pod's token variables: MSRUN_TOKEN from secretKeyRef, or
    MSRUN_TOKEN_FILE pointing at the Secret mounted with subPath."""
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    out = {"env": []}
    for e in container.get("env", []):
        if e["name"] == "MSRUN_TOKEN":
            ref = e["valueFrom"]["secretKeyRef"]
            need(ref["name"] in secrets, "MSRUN_TOKEN's Secret %s is defined" % ref["name"])
            need(ref["key"] in secrets[ref["name"]]["stringData"], "the Secret has the key")
            out["env"].append({"name": "MSRUN_TOKEN",
                               "value": secrets[ref["name"]]["stringData"][ref["key"]]})
        elif e["name"] == "MSRUN_TOKEN_FILE":
            mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == e["value"]]
            need(mounts, "MSRUN_TOKEN_FILE %s is a mounted path" % e["value"])
            need(mounts[0].get("subPath"), "the token is mounted with subPath (no symlink)")
            out["env"].append({"name": "MSRUN_TOKEN_FILE", "value": os.path.join(tmpdir, "token")})
            out["mount"] = mounts[0]
        else:
            out["env"].append({"name": e["name"], "value": e.get("value", "")})
    need(any(e["name"].startswith("MSRUN_TOKEN") for e in out["env"]),
         "the pod gets the job token from a Secret")
    return out, secrets


def check_pod_template(name, job_spec, pod_spec, docs, master, svc_port, nnodes_want):
    need(job_spec.get("completionMode") == "Indexed", "%s: completionMode Indexed" % name)
    par, comp = job_spec.get("parallelism"), job_spec.get("completions")
    need(par == comp == nnodes_want,
         "%s: parallelism %s = completions %s = nodes %s" % (name, par, comp, nnodes_want))
    need(pod_spec.get("restartPolicy") == "Never", "%s: restartPolicy Never" % name)
    (c,) = pod_spec["containers"]
    cmd = c["command"] + c.get("args", [])
    f = flags(cmd)
    need(int(f["nnodes"]) == nnodes_want, "%s: --nnodes=%s matches %s pods" % (name, f["nnodes"], nnodes_want))
    need(f["master_addr"] == master, "%s: --master_addr=%s, want %s" % (name, f["master_addr"], master))
    need(int(f["master_port"]) == svc_port, "%s: --master_port matches the port %d" % (name, svc_port))
    need(any(p["containerPort"] == svc_port for p in c.get("ports", [])),
         "%s: the container exposes the coordinator's port" % name)
    sec, secrets = secret_env(c, docs, tmp)
    if "mount" in sec:
        vols = {v["name"]: v for v in pod_spec.get("volumes", [])}
        v = vols.get(sec["mount"]["name"])
        need(v and v["secret"]["secretName"] in secrets, "%s: the token volume is the Secret" % name)
        need(v["secret"].get("defaultMode", 0o644) & 0o077 == 0,
             "%s: the token file's mode gives nothing to group and others" % name)
        key = sec["mount"]["subPath"]
        with open(os.path.join(tmp, "token"), "w") as fh:
            fh.write(secrets[v["secret"]["secretName"]]["stringData"][key])
        os.chmod(os.path.join(tmp, "token"), 0o400)
    lwn = int(f["local_worker_num"])
    for index in (0, 1):
        r = dry_run(cmd, {"JOB_COMPLETION_INDEX": str(index)}, sec)
        want = {
            "scheduler": ("kubernetes", "kubernetes: its variables are set"),
            "node_rank": (str(index), "kubernetes: JOB_COMPLETION_INDEX"),
            "nnodes": (str(nnodes_want), "option: --nnodes"),
            "master_addr": (master, "option: --master_addr"),
            "master_port": (str(svc_port), "option: --master_port"),
            "coordinator_here": ("true" if index == 0 else "false",
                                 "kubernetes: node rank %d%s" % (index, " hosts it" if index == 0 else "")),
            "worker_num": (str(lwn * nnodes_want), "derived: local_worker_num x nnodes"),
            "auth": ("token", None),
        }
        for k, (v, src) in want.items():
            need(k in r, "%s: --dry_run prints %s" % (name, k))
            need(r[k][0] == v and (src is None or r[k][1] == src),
                 "%s, index %d: %s = %s (%s), want %s (%s)" % (name, index, k, r[k][0], r[k][1], v, src))
    print("ok   %s: pod index 0 hosts the coordinator, index 1 is node 1 of %d, %d workers"
          % (name, nnodes_want, lwn * nnodes_want))


def load(fname):
    with open(os.path.join(deploy, fname)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


# the Indexed Job with its headless Service
docs = load("indexed-job.yaml")
kinds = {d["kind"]: d for d in docs}
need({"Secret", "Service", "Job"} <= set(kinds), "indexed-job.yaml: a Secret, a Service and a Job")
svc, job = kinds["Service"], kinds["Job"]
need(svc["spec"].get("clusterIP") == "None", "the Service is headless (clusterIP: None)")
need(svc["spec"].get("publishNotReadyAddresses") is True,
     "the Service publishes pods that are not ready (msrun waits for peers before any probe)")
need(svc["spec"]["selector"].get("job-name") == job["metadata"]["name"],
     "the Service selects the Job's pods (job-name label)")
pod = job["spec"]["template"]["spec"]
need(pod.get("subdomain") == svc["metadata"]["name"], "the pods' subdomain is the Service's name")
port = svc["spec"]["ports"][0]["port"]
master = "%s-0.%s" % (job["metadata"]["name"], svc["metadata"]["name"])
check_pod_template("indexed-job.yaml", job["spec"], pod, docs, master, port, job["spec"]["completions"])

# the JobSet
docs = load("jobset.yaml")
kinds = {d["kind"]: d for d in docs}
need({"Secret", "JobSet"} <= set(kinds), "jobset.yaml: a Secret and a JobSet")
js = kinds["JobSet"]
net = js["spec"]["network"]
need(net.get("enableDNSHostnames") is True, "the JobSet gives pods DNS names")
need(net.get("publishNotReadyAddresses") is True, "the JobSet publishes pods that are not ready")
sub = net.get("subdomain", js["metadata"]["name"])
(rj,) = js["spec"]["replicatedJobs"]
need(rj.get("replicas", 1) == 1, "one Job: its completion index is the node rank")
jspec = rj["template"]["spec"]
master = "%s-%s-0-0.%s" % (js["metadata"]["name"], rj["name"], sub)
port = jspec["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
check_pod_template("jobset.yaml", jspec, jspec["template"]["spec"], docs, master, port,
                   jspec["completions"])
