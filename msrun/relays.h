/* Relays chosen at launch (--relays, docs/architecture.md "Relays"): which
 * node serves the relay of this node's group, and where. Every node
 * computes the same answer from what it knows at start: its --node_rank,
 * the job's node count, and the host of the group's first node
 * (--relays_host, which a --hostfile launch gives each host's msrun;
 * Slurm's node list; a job on one machine: the coordinator's loopback
 * host). */
#ifndef MSR_MSRUN_RELAYS_H
#define MSR_MSRUN_RELAYS_H

#include "launcher/options.h"

/* --relays auto: every MSR_RELAYS_AUTO_K-th node serves a relay when the
 * job has more than that many nodes; smaller jobs have none. */
#define MSR_RELAYS_AUTO_K 1024
/* --relays's words, stored as -1 - index */
#define MSR_RELAYS_AUTO   (-1)
#define MSR_RELAYS_OFF    (-2)

typedef struct msr_relays_plan {
    int k;            /* nodes a group has at most; 0: this node uses no relay */
    int group;        /* this node's group: node_rank / k */
    int leader;       /* the node that serves the group's relay: group * k */
    int members;      /* the group's nodes: k, or fewer for the last group */
    int serve;        /* this node is the leader */
    int port;         /* the relay's port: msr_relays_port */
    char id[24];      /* the relay's id in the job: "relay-<group>" */
    char target[300]; /* HOST:PORT of the relay */
    const char *why;  /* k == 0: why (static text) */
} msr_relays_plan_t;

/* Group g's relay port: master_port + 2 + g (master_port + 1 is torch's
 * MASTER_PORT when derived, which rank 0's store binds on node 0's host,
 * where relay-0 listens too). Past 65535 where the options make it so. */
long msr_relays_port(const msr_options_t *o, int g);

/* The group size --relays gives a job of nodes nodes (0: no relays). */
int msr_relays_k(int relays, int nodes);

/* Why a job of groups of k nodes (msr_relays_k's) has no relays, from the
 * options that all its nodes share (static text); NULL: it has. */
const char *msr_relays_job_why(const msr_options_t *o, int k);

/* This node's plan from its options (and, under Slurm, its node list).
 * Returns 0, or -1 with a message printed (the relay's port past 65535, or
 * a Slurm node list without the group's first node) for msrun to exit 2. */
int msr_relays_plan(const msr_options_t *o, msr_relays_plan_t *p);

#endif
