/* Unit tests of msrun/hostlist.c (Slurm's compressed host lists) and
 * msrun/sched.c (what Slurm's and Kubernetes' variables say), fed with
 * variables and name lookups of their own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/status.h"
#include "launcher/hostlist.h"
#include "launcher/sched.h"
#include "tests/runner.h"

/* Expands text and checks it gives exactly the names in want (space-separated). */
static void check_expand(const char *text, const char *want)
{
    msr_hostlist_t hl;
    msr_status_t st = msr_hostlist_expand(text, 0, &hl);
    MSR_CHECK_MSG(st == MSR_OK, "'%s': %s", text, msr_err_msg());
    char got[4096] = "";
    size_t len = 0;
    for (size_t i = 0; i < hl.count; i++)
        len += (size_t)snprintf(got + len, sizeof got - len, "%s%s", i ? " " : "", hl.hosts[i]);
    MSR_CHECK_MSG(strcmp(got, want) == 0, "'%s' gave '%s', not '%s'", text, got, want);
    msr_hostlist_free(&hl);
}

static void check_bad(const char *text, msr_status_t want, const char *words)
{
    msr_hostlist_t hl = {(char **)1, 77};
    msr_status_t st = msr_hostlist_expand(text, 0, &hl);
    MSR_CHECK_MSG(st == want, "'%s': %s, not %s", text, msr_status_str(st), msr_status_str(want));
    MSR_CHECK_MSG(strstr(msr_err_msg(), words) != NULL, "'%s': message '%s' lacks '%s'", text,
                  msr_err_msg(), words);
    MSR_CHECK(hl.hosts == (char **)1 && hl.count == 77); /* untouched on failure */
}

static void test_hostlist_forms(void)
{
    check_expand("n1", "n1");
    check_expand("node-a.example.org", "node-a.example.org");
    check_expand("n[1-3]", "n1 n2 n3");
    check_expand("n[01-04,07]", "n01 n02 n03 n04 n07");
    check_expand("n[8-11]", "n8 n9 n10 n11");
    check_expand("n[098-101]", "n098 n099 n100 n101");
    check_expand("x,y[1-3]", "x y1 y2 y3");
    check_expand("a[1-2]-b[3-4]", "a1-b3 a1-b4 a2-b3 a2-b4");
    check_expand("r[1-2]c[1,3]n[0-1]", "r1c1n0 r1c1n1 r1c3n0 r1c3n1 r2c1n0 r2c1n1 r2c3n0 r2c3n1");
    check_expand("n[1-2].ib", "n1.ib n2.ib");
    check_expand("[1-2]", "1 2");
    check_expand("gpu[7],cpu[0-1],login", "gpu7 cpu0 cpu1 login");
    check_expand("n[2,1,2]", "n2 n1 n2"); /* Slurm's order, duplicates kept */
}

static void test_hostlist_malformed(void)
{
    check_bad("", MSR_ERR_INVALID_ARG, "empty");
    check_bad("n[1-2", MSR_ERR_INVALID_ARG, "'[' without ']'");
    check_bad("n1-2]", MSR_ERR_INVALID_ARG, "']' without '['");
    check_bad("n[1-[2]]", MSR_ERR_INVALID_ARG, "a number expected");
    check_bad("n[1,[2]]", MSR_ERR_INVALID_ARG, "a number expected");
    check_bad("n[1 2]", MSR_ERR_INVALID_ARG, "unexpected character");
    check_bad("n[5-3]", MSR_ERR_INVALID_ARG, "reversed range");
    check_bad("n[]", MSR_ERR_INVALID_ARG, "a number expected");
    check_bad("n[a-b]", MSR_ERR_INVALID_ARG, "a number expected");
    check_bad("n[1-]", MSR_ERR_INVALID_ARG, "a number expected");
    check_bad("n[-1]", MSR_ERR_INVALID_ARG, "a number expected");
    check_bad("a,,b", MSR_ERR_INVALID_ARG, "empty host name");
    check_bad("a,", MSR_ERR_INVALID_ARG, "empty host name");
    check_bad(",a", MSR_ERR_INVALID_ARG, "empty host name");
    check_bad("a b", MSR_ERR_INVALID_ARG, "space or control");
    check_bad("n[1-9999999999999999999]", MSR_ERR_INVALID_ARG, "more than 18 digits");
    check_bad("n[0-99999999]", MSR_ERR_OVERFLOW, "more than 65536 hosts");
    check_bad("a[0-999]b[0-999]", MSR_ERR_OVERFLOW, "more than 65536 hosts");
    check_bad("n[0-40000],m[0-40000]", MSR_ERR_OVERFLOW, "more than 65536 hosts");
    char longname[300];
    memset(longname, 'x', 260);
    longname[260] = '\0';
    check_bad(longname, MSR_ERR_INVALID_ARG, "longer than 255");
}

/* A host name of MSR_HOSTLIST_NAME_MAX (255) characters, written out or made
 * by a bracket, is taken; one of 256 is refused. */
static void test_hostlist_name_bound(void)
{
    char text[300], want[600];
    for (int len = 253; len <= 256; len++) {
        memset(text, 'x', (size_t)len);
        text[len] = '\0';
        if (len <= MSR_HOSTLIST_NAME_MAX)
            check_expand(text, text);
        else
            check_bad(text, MSR_ERR_INVALID_ARG, "longer than 255");
    }
    /* 252 letters and three digits: 255; the widest number counts */
    memset(text, 'x', 252);
    snprintf(text + 252, sizeof text - 252, "[098-099]");
    memset(want, 'x', 252);
    snprintf(want + 252, sizeof want - 252, "098 ");
    memcpy(want + 256, want, 252);
    snprintf(want + 508, sizeof want - 508, "099");
    check_expand(text, want);
    /* 256: 253 letters and "100", or 252 and "1000" */
    memset(text, 'x', 253);
    snprintf(text + 253, sizeof text - 253, "[98-100]");
    check_bad(text, MSR_ERR_INVALID_ARG, "longer than 255");
    snprintf(text + 252, sizeof text - 252, "[9,1000]");
    check_bad(text, MSR_ERR_INVALID_ARG, "longer than 255");
}

/* 16 bracket groups in one host (MAX_GROUPS), each with literal text
 * around it, are taken; a 17th is refused. */
static void test_hostlist_groups(void)
{
    char text[200] = "", want[200] = "";
    for (int g = 0; g < 16; g++) {
        snprintf(text + strlen(text), sizeof text - strlen(text), "h%c[%d]", 'a' + g, g);
        snprintf(want + strlen(want), sizeof want - strlen(want), "h%c%d", 'a' + g, g);
    }
    strcat(text, "z");
    strcat(want, "z");
    check_expand(text, want);
    text[strlen(text) - 1] = '\0';
    strcat(text, "[7]z");
    check_bad(text, MSR_ERR_INVALID_ARG, "more than 16 bracket groups");
}

static void test_hostlist_cap(void)
{
    msr_hostlist_t hl;
    MSR_CHECK(msr_hostlist_expand("n[1-4]", 4, &hl) == MSR_OK && hl.count == 4);
    msr_hostlist_free(&hl);
    MSR_CHECK(msr_hostlist_expand("n[1-5]", 4, &hl) == MSR_ERR_OVERFLOW);
    MSR_CHECK(msr_hostlist_expand("n[0-65535]", 0, &hl) == MSR_OK && hl.count == 65536);
    MSR_CHECK_STR(hl.hosts[65535], "n65535");
    msr_hostlist_free(&hl);
    msr_hostlist_free(&hl); /* twice, and NULL, do nothing */
    msr_hostlist_free(NULL);
}

/* ---- the resolver, fed with variables of our own ---- */

typedef struct fake {
    const char *vars[32]; /* "NAME=value" */
    int lookups;          /* calls of lookup */
} fake_t;

static const char *fake_get(void *ctx, const char *name)
{
    fake_t *f = ctx;
    size_t n = strlen(name);
    for (int i = 0; f->vars[i]; i++)
        if (strncmp(f->vars[i], name, n) == 0 && f->vars[i][n] == '=')
            return f->vars[i] + n + 1;
    return NULL;
}

/* Names starting with "dns" resolve; n<k> has NodeAddr 10.0.0.<k>; others fail. */
static int fake_lookup(void *ctx, const char *host, char *out, size_t len, char *how, size_t hl)
{
    fake_t *f = ctx;
    f->lookups++;
    if (strncmp(host, "dns", 3) == 0) {
        snprintf(out, len, "%s", host);
        snprintf(how, hl, "DNS");
        return 0;
    }
    if (host[0] == 'n') {
        snprintf(out, len, "10.0.0.%s", host + 1);
        snprintf(how, hl, "NodeAddr of %s", host);
        return 0;
    }
    msr_err_set("cannot resolve '%s'", host);
    return -1;
}

static msr_status_t detect(fake_t *f, int want_addr, msr_sched_t *s)
{
    msr_sched_env_t env = {fake_get, fake_lookup, f};
    memset(s, 0x5a, sizeof *s);
    return msr_sched_detect(&env, want_addr, s);
}

/* What srun -N2 --ntasks-per-node=1 sets, for node 1 (Slurm 22.05). */
#define SRUN_N2_NODE1                                                                          \
    "SLURM_JOB_ID=4242", "SLURM_JOBID=4242", "SLURM_STEP_ID=0", "SLURM_STEPID=0",              \
        "SLURM_NODEID=1", "SLURM_NNODES=2", "SLURM_JOB_NUM_NODES=2", "SLURM_STEP_NUM_NODES=2", \
        "SLURM_NTASKS=2", "SLURM_STEP_NUM_TASKS=2", "SLURM_NTASKS_PER_NODE=1",                 \
        "SLURM_TASKS_PER_NODE=1(x2)", "SLURM_LOCALID=0", "SLURM_PROCID=1",                     \
        "SLURM_JOB_NODELIST=n[1-2]", "SLURM_NODELIST=n[1-2]", "SLURM_STEP_NODELIST=n[1-2]"

static void test_none(void)
{
    fake_t f = {{"HOME=/root", "MASTER_ADDR=10.9.9.9", "MASTER_PORT=1234", NULL}, 0};
    msr_sched_t s;
    MSR_CHECK(detect(&f, 1, &s) == MSR_OK);
    MSR_CHECK_EQ(s.kind, MSR_SCHED_NONE);
    /* torchrun's MASTER_* alone (a shell that once ran torch) mean nothing */
    MSR_CHECK(!s.has_addr && !s.has_port && !s.has_nodes && !s.has_node_rank && !s.has_job_id);
    MSR_CHECK_EQ(s.host_rank, -1);
    MSR_CHECK_EQ(f.lookups, 0);
}

static void test_slurm_srun(void)
{
    fake_t f = {{SRUN_N2_NODE1, NULL}, 0};
    msr_sched_t s;
    MSR_CHECK_MSG(detect(&f, 1, &s) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK_EQ(s.kind, MSR_SCHED_SLURM);
    MSR_CHECK(s.in_step);
    MSR_CHECK(s.has_node_rank && s.node_rank == 1 && s.host_rank == 1);
    MSR_CHECK_EQ(s.node_rank_from.src, MSR_SRC_SLURM);
    MSR_CHECK_STR(s.node_rank_from.what, "SLURM_NODEID");
    MSR_CHECK(s.has_nodes && s.min_nodes == 2 && s.max_nodes == 2);
    MSR_CHECK_STR(s.nodes_from.what, "SLURM_STEP_NUM_NODES");
    MSR_CHECK(s.has_job_id);
    MSR_CHECK_STR(s.job_id, "slurm-4242");
    MSR_CHECK(s.has_port && s.master_port == 20000 + 4242);
    /* n1 does not resolve by DNS: its NodeAddr */
    MSR_CHECK(s.has_addr);
    MSR_CHECK_STR(s.master_addr, "10.0.0.1");
    MSR_CHECK_EQ(s.addr_from.src, MSR_SRC_SLURM);
    MSR_CHECK_STR(s.addr_from.what, "NodeAddr of n1, the first host of SLURM_STEP_NODELIST");
    MSR_CHECK_EQ(f.lookups, 1);
    MSR_CHECK(!s.has_local); /* no GPUs: msrun's own default */
    /* SLURM_NODEID unset is no node rank at all (not node 0); 0 and the
     * largest one, 2^20 - 1, are node ranks; 2^20 is refused */
    fake_t g = {{"SLURM_JOB_ID=4242", "SLURM_STEP_ID=0", "SLURM_NNODES=2",
                 "SLURM_STEP_NODELIST=n[1-2]", NULL, NULL},
                0};
    MSR_CHECK_MSG(detect(&g, 1, &s) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK_EQ(s.kind, MSR_SCHED_SLURM);
    MSR_CHECK(!s.has_node_rank && s.host_rank == -1);
    MSR_CHECK_EQ(s.node_rank_from.src, MSR_SRC_DEFAULT);
    const char *ids[] = {"SLURM_NODEID=0", "SLURM_NODEID=1048575", "SLURM_NODEID=1048576"};
    for (int i = 0; i < 3; i++) {
        g.vars[4] = ids[i];
        msr_status_t st = detect(&g, 1, &s);
        if (i == 2) {
            MSR_CHECK_EQ(st, MSR_ERR_INVALID_ARG);
            MSR_CHECK_MSG(strstr(msr_err_msg(), "SLURM_NODEID='1048576'"), "%s", msr_err_msg());
        } else {
            MSR_CHECK_MSG(st == MSR_OK, "%s", msr_err_msg());
            MSR_CHECK(s.has_node_rank && s.node_rank == (i ? 1048575 : 0));
            MSR_CHECK_EQ(s.node_rank_from.src, MSR_SRC_SLURM);
        }
    }
}

static void test_slurm_details(void)
{
    /* a name DNS knows is kept as a name; the step's list, not the job's */
    fake_t f = {{"SLURM_JOB_ID=7", "SLURM_STEP_ID=3", "SLURM_NODEID=0", "SLURM_NNODES=3",
                 "SLURM_JOB_NODELIST=big[1-9]", "SLURM_STEP_NODELIST=dns[04-06]",
                 "SLURM_STEP_NUM_TASKS=3", "SLURM_GPUS_ON_NODE=4", NULL},
                0};
    msr_sched_t s;
    MSR_CHECK_MSG(detect(&f, 1, &s) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK_STR(s.master_addr, "dns04");
    MSR_CHECK_STR(s.addr_from.what, "the first host of SLURM_STEP_NODELIST");
    MSR_CHECK_STR(s.nodes_from.what, "SLURM_NNODES");
    MSR_CHECK(s.has_local && s.local_worker_num == 4);
    MSR_CHECK_STR(s.local_from.what, "SLURM_GPUS_ON_NODE");
    MSR_CHECK_EQ(s.host_rank, 0);
    /* the address not wanted (given as an option): nothing looked up */
    f.lookups = 0;
    MSR_CHECK(detect(&f, 0, &s) == MSR_OK && !s.has_addr && f.lookups == 0);
    /* one node: no master address at all (a standalone job) */
    fake_t one = {{"SLURM_JOB_ID=8", "SLURM_STEP_ID=0", "SLURM_NODEID=0", "SLURM_NNODES=1",
                   "SLURM_JOB_NODELIST=n1", NULL},
                  0};
    MSR_CHECK(detect(&one, 1, &s) == MSR_OK && !s.has_addr && one.lookups == 0);
    /* a batch script (no step): nothing looked up; msrun refuses if nodes > 1 */
    fake_t batch = {{"SLURM_JOB_ID=9", "SLURM_NODEID=0", "SLURM_NNODES=2", "SLURM_NTASKS=8",
                     "SLURM_JOB_NODELIST=n[1-2]", NULL},
                    0};
    MSR_CHECK(detect(&batch, 1, &s) == MSR_OK && !s.in_step && !s.has_addr);
}

static void test_slurm_refusals(void)
{
    msr_sched_t s;
    /* srun -n4 on 2 nodes: four msrun, two per node */
    fake_t many = {{"SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_NODEID=0", "SLURM_NNODES=2",
                    "SLURM_STEP_NUM_NODES=2", "SLURM_STEP_NUM_TASKS=4", "SLURM_LOCALID=0",
                    "SLURM_JOB_NODELIST=n[1-2]", NULL},
                   0};
    MSR_CHECK(detect(&many, 1, &s) == MSR_ERR_INVALID_ARG);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "srun -N2 --ntasks-per-node=1 msrun") != NULL, "%s",
                  msr_err_msg());
    /* the second task of a node */
    fake_t local = {{"SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_NODEID=0", "SLURM_NNODES=1",
                     "SLURM_LOCALID=1", NULL},
                    0};
    MSR_CHECK(detect(&local, 1, &s) == MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_err_msg(), "one msrun per node") != NULL);
    const char *bad[][2] = {
        {"SLURM_NODEID=x", "SLURM_NODEID='x' is not a number"},
        {"SLURM_NNODES=0", "SLURM_NNODES='0' is not a number"},
        {"SLURM_JOB_NODELIST=n[2-1]", "reversed range"},
        {"SLURM_JOB_NODELIST=n[1-2", "'[' without ']'"},
        {"SLURM_STEP_NUM_TASKS=x", "SLURM_STEP_NUM_TASKS='x' is not a number"},
        {"SLURM_LOCALID=x", "SLURM_LOCALID='x' is not a number"},
        {"SLURM_GPUS_ON_NODE=x", "SLURM_GPUS_ON_NODE='x' is not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fake_t f = {{bad[i][0], "SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_NODEID=0",
                     "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-2]", NULL},
                    0};
        MSR_CHECK(detect(&f, 1, &s) == MSR_ERR_INVALID_ARG);
        MSR_CHECK_MSG(strstr(msr_err_msg(), bad[i][1]) != NULL, "%s: '%s'", bad[i][0],
                      msr_err_msg());
    }
    fake_t job = {{"SLURM_JOB_ID=12ab", NULL}, 0};
    MSR_CHECK(detect(&job, 1, &s) == MSR_ERR_INVALID_ARG);
    /* a master that resolves neither way */
    fake_t lost = {{"SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_NODEID=1", "SLURM_NNODES=2",
                    "SLURM_JOB_NODELIST=zz[1-2]", NULL},
                   0};
    MSR_CHECK(detect(&lost, 1, &s) == MSR_ERR_INVALID_ARG);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "zz1") != NULL, "%s", msr_err_msg());
}

static void test_kubernetes(void)
{
    msr_sched_t s;
    /* an Indexed Job: the index is the node rank, the rest comes as options */
    fake_t idx = {{"JOB_COMPLETION_INDEX=1", "KUBERNETES_SERVICE_HOST=10.96.0.1", NULL}, 0};
    MSR_CHECK(detect(&idx, 1, &s) == MSR_OK);
    MSR_CHECK_EQ(s.kind, MSR_SCHED_KUBERNETES);
    MSR_CHECK(s.has_node_rank && s.node_rank == 1 && s.host_rank == 1);
    MSR_CHECK_EQ(s.node_rank_from.src, MSR_SRC_KUBERNETES);
    MSR_CHECK_STR(s.node_rank_from.what, "JOB_COMPLETION_INDEX");
    MSR_CHECK(!s.has_nodes && !s.has_addr && !s.has_port && !s.has_job_id);
    /* Kubeflow's PyTorchJob: PET_* win over torchrun's plain MASTER_* */
    fake_t pet = {{"PET_NNODES=4", "PET_NODE_RANK=3", "PET_NPROC_PER_NODE=2",
                   "PET_MASTER_ADDR=job-master-0", "PET_MASTER_PORT=23456", "MASTER_ADDR=other",
                   "MASTER_PORT=1", "JOB_COMPLETION_INDEX=0", NULL},
                  0};
    MSR_CHECK(detect(&pet, 1, &s) == MSR_OK);
    MSR_CHECK(s.has_nodes && s.min_nodes == 4 && s.max_nodes == 4);
    MSR_CHECK(s.node_rank == 3);
    MSR_CHECK_STR(s.node_rank_from.what, "PET_NODE_RANK");
    MSR_CHECK(s.has_local && s.local_worker_num == 2);
    MSR_CHECK_STR(s.master_addr, "job-master-0");
    MSR_CHECK_STR(s.addr_from.what, "PET_MASTER_ADDR");
    MSR_CHECK(s.master_port == 23456);
    MSR_CHECK_STR(s.port_from.what, "PET_MASTER_PORT");
    MSR_CHECK_EQ(pet.lookups, 0);
    /* plain MASTER_* in a pod that is a node of a job (PET_NNODES) */
    fake_t plain = {{"KUBERNETES_SERVICE_HOST=10.96.0.1", "PET_NNODES=2", "MASTER_ADDR=m.svc",
                     "MASTER_PORT=29500", NULL},
                    0};
    MSR_CHECK(detect(&plain, 1, &s) == MSR_OK);
    MSR_CHECK(s.has_addr && s.has_port && s.master_port == 29500);
    MSR_CHECK_STR(s.addr_from.what, "MASTER_ADDR");
    MSR_CHECK(!s.has_node_rank && s.host_rank == -1);
    /* ... but any pod may carry them: alone they mean nothing */
    fake_t pod = {
        {"KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=m.svc", "MASTER_PORT=29500", NULL}, 0};
    MSR_CHECK(detect(&pod, 1, &s) == MSR_OK);
    MSR_CHECK_EQ(s.kind, MSR_SCHED_KUBERNETES);
    MSR_CHECK(!s.has_addr && !s.has_port && !s.has_nodes && !s.has_node_rank);
    /* elastic: the coordinator assigns ranks, but rank 0 still hosts it */
    fake_t el = {{"PET_NNODES=1:4", "PET_NODE_RANK=0", "PET_NPROC_PER_NODE=gpu", NULL}, 0};
    MSR_CHECK(detect(&el, 1, &s) == MSR_OK);
    MSR_CHECK(s.min_nodes == 1 && s.max_nodes == 4 && !s.has_node_rank && s.host_rank == 0);
    MSR_CHECK(!s.has_local); /* "gpu": msrun's own default */
    const char *bad[][2] = {
        {"PET_NNODES=4:2", "MIN is larger"},
        {"PET_NNODES=two", "not a node count"},
        {"JOB_COMPLETION_INDEX=-1", "JOB_COMPLETION_INDEX='-1' is not a number"},
        {"PET_MASTER_PORT=70000", "PET_MASTER_PORT='70000' is not a number"},
        {"PET_NPROC_PER_NODE=0", "PET_NPROC_PER_NODE='0'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fake_t f = {{bad[i][0], NULL}, 0};
        MSR_CHECK(detect(&f, 1, &s) == MSR_ERR_INVALID_ARG);
        MSR_CHECK_MSG(strstr(msr_err_msg(), bad[i][1]) != NULL, "%s: '%s'", bad[i][0],
                      msr_err_msg());
    }
}

/* The system's lookup of a name DNS does not know, through a scontrol of
 * the test's in PATH (script: its body; NULL: no scontrol at all); and
 * with no descriptor to spare when tight. The lookup's result; its
 * address in out, the error text in msr_err_msg(). */
static int lookup_with(const char *script, int tight, char *out, size_t len)
{
    char dir[] = "/tmp/test_sched_XXXXXX", path[64];
    MSR_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/scontrol", dir);
    if (script) {
        FILE *f = fopen(path, "w");
        MSR_CHECK(f != NULL);
        fputs(script, f);
        fclose(f);
        MSR_CHECK(chmod(path, 0700) == 0);
    }
    const char *old = getenv("PATH");
    char *saved = old ? strdup(old) : NULL;
    setenv("PATH", dir, 1);
    msr_sched_env_t env;
    msr_sched_env_system(&env);
    char how[64];
    struct rlimit lim;
    MSR_CHECK(getrlimit(RLIMIT_NOFILE, &lim) == 0);
    if (tight) { /* no descriptor left: the lowest free one is the bound */
        int free_fd = 0;
        while (fcntl(free_fd, F_GETFD) >= 0)
            free_fd++;
        struct rlimit low = {(rlim_t)free_fd, lim.rlim_max};
        MSR_CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    }
    int r = env.lookup(env.ctx, "no-such-host.invalid", out, len, how, sizeof how);
    MSR_CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0);
    if (saved) {
        setenv("PATH", saved, 1);
        free(saved);
    }
    unlink(path);
    rmdir(dir);
    return r;
}

/* scontrol's NodeAddr stands in for DNS; each way scontrol can fail is
 * an error that names it, never an address. */
static void test_nodeaddr_scontrol(void)
{
    char out[256] = "";
    MSR_CHECK_EQ(
        lookup_with("#!/bin/sh\necho 'NodeName=x NodeAddr=127.0.0.1 Arch=x'\n", 0, out, sizeof out),
        0);
    MSR_CHECK_STR(out, "127.0.0.1");
    const struct {
        const char *script, *why;
        int tight;
    } bad[] = {
        {NULL, "and scontrol is not in PATH", 0},
        {"#!/nonexistent/interpreter\n", "cannot execute", 0},
        {"#!/bin/sh\nexec /bin/sleep 60\n", "gave no answer within 5 s", 0},
        {"#!/bin/sh\necho 'NodeName=x Arch=x'\n", "gives no NodeAddr", 0},
        {"#!/bin/sh\necho 'NodeAddr=127.0.0.1'\n", "pipe: ", 1},
    };
    for (size_t i = 0; i < MSR_ARRAY_SIZE(bad); i++) {
        strcpy(out, "untouched");
        MSR_CHECK_EQ(lookup_with(bad[i].script, bad[i].tight, out, sizeof out), -1);
        MSR_CHECK_MSG(strstr(msr_err_msg(), bad[i].why) != NULL, "%zu: %s", i, msr_err_msg());
        MSR_CHECK_STR(out, "untouched");
    }
}

static void test_nodeaddr(void)
{
    char a[64];
    const char *out = "NodeName=n1 Arch=x86_64 CoresPerSocket=1\n"
                      "   CPUAlloc=0 CPUTot=2 CPULoad=0.00\n"
                      "   NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05\n";
    MSR_CHECK(msr_sched_parse_nodeaddr(out, a, sizeof a) == 0);
    MSR_CHECK_STR(a, "127.0.0.1");
    MSR_CHECK(msr_sched_parse_nodeaddr("XNodeAddr=1.2.3.4\n", a, sizeof a) == -1);
    MSR_CHECK(msr_sched_parse_nodeaddr("Node n9 not found\n", a, sizeof a) == -1);
    MSR_CHECK(msr_sched_parse_nodeaddr("   NodeAddr= x", a, sizeof a) == -1);
}

static const msr_test_t tests[] = {
    {"hostlist_forms", test_hostlist_forms, 10},
    {"hostlist_malformed", test_hostlist_malformed, 10},
    {"hostlist_groups", test_hostlist_groups, 10},
    {"hostlist_cap", test_hostlist_cap, 10},
    {"hostlist_name_bound", test_hostlist_name_bound, 10},
    {"none", test_none, 10},
    {"slurm_srun", test_slurm_srun, 10},
    {"slurm_details", test_slurm_details, 10},
    {"slurm_refusals", test_slurm_refusals, 10},
    {"kubernetes", test_kubernetes, 10},
    {"nodeaddr", test_nodeaddr, 10},
    {"nodeaddr_scontrol", test_nodeaddr_scontrol, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
