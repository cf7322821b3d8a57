/* One command for a whole job: `msrun --hostfile FILE` or `msrun -H
 * a:8,b:8` starts one msrun per host over ssh and stays in front of them
 * (the "launcher"): it passes their output through, forwards Ctrl-C and
 * stops them all when one fails (docs/usage.md, "One command for a whole
 * job"). The host list is parsed and the workers assigned here too. */
#ifndef MSR_MSRUN_REMOTE_H
#define MSR_MSRUN_REMOTE_H

#include <stdint.h>

#include "launcher/options.h"
#include "msrun/base.h"

/* The most hosts a job's list may name: the launcher holds an ssh process
 * and 3 pipes per host (beyond a few thousand hosts, use a scheduler). */
#define MSR_REMOTE_HOSTS_MAX 4096
/* The longest host name, without its NUL (a DNS name is at most 253). */
#define MSR_REMOTE_NAME_MAX  255
/* The most slots of one host: slots=1 to this. */
#define MSR_REMOTE_SLOTS_MAX INT32_MAX

typedef struct msr_remote_host {
    char *name;  /* as written: what ssh is given, and node 0's is master_addr */
    int slots;   /* slots=K (1 when not given); a host named twice adds up */
    int workers; /* assigned by msr_remote_hosts_assign; 0: not used */
} msr_remote_host_t;

typedef struct msr_remote_hosts {
    msr_remote_host_t *v; /* [count], in the order first named */
    int count;
} msr_remote_hosts_t;

/* Parses an Open MPI hostfile: one "HOST [slots=K] [max_slots=M]" a line
 * (max_slots is accepted and ignored), '#' starts a comment, blank lines
 * are skipped. On failure returns MSR_ERR_INVALID_ARG (the file's name and
 * the line number in msr_err_msg()) or MSR_ERR_IO, and *h is untouched; on
 * success *h (zeroed by the caller) owns the names. */
msr_status_t msr_remote_hosts_parse_file(const char *path, msr_remote_hosts_t *h);

/* Parses Open MPI's -H list: "HOST[:K][,HOST[:K]...]", K slots (1 when
 * not given). Errors and ownership as msr_remote_hosts_parse_file. */
msr_status_t msr_remote_hosts_parse_list(const char *list, msr_remote_hosts_t *h);

/* Fills the hosts' slots in order until n workers are placed; n <= 0
 * places one worker per slot. MSR_ERR_INVALID_ARG (both numbers in
 * msr_err_msg()) when the slots sum below n. */
msr_status_t msr_remote_hosts_assign(msr_remote_hosts_t *h, int64_t n);

/* destroy(NULL)-safe: frees the names and the array. */
void msr_remote_hosts_free(msr_remote_hosts_t *h);

/* The launcher: argc/argv are msrun's arguments after "msrun" (as parsed
 * into o, whose --hostfile or --host is set). Returns msrun's exit status:
 * 2 for bad input before any ssh starts, the first failing host's status
 * (128 + signal when its ssh was killed) after it stopped the others,
 * 128 + signal after SIGINT/SIGTERM/SIGHUP, else 0. Main thread only; it
 * installs its own signal handlers. */
int msr_remote_run(const msr_options_t *o, int argc, char **argv);

#endif
