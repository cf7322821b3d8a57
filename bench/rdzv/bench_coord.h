/* Benchmarks' coordinator: a real `msrun coordinator` process on a free
 * loopback port, for the rendezvous and store benchmarks. */
#ifndef MSR_BENCH_COORD_H
#define MSR_BENCH_COORD_H

#include <sys/types.h>

/* Starts msrun (the path of an msrun executable) as
 * `msrun coordinator --bind 127.0.0.1:0 --ready_fd 3 ARGS...` with
 * MSRUN_TOKEN=token, and waits up to 10 s for it to say its port. args ends
 * with NULL. Returns the coordinator's pid with *port_p set, or -1 (after
 * saying why on stderr, prefixed with who, and reaping the child). */
pid_t bench_coord_start(const char *who, const char *msrun, const char *token,
                        const char *const args[], int *port_p);

#endif
