/* Benchmarks' coordinator: a real `msrun coordinator` process on a free
 * loopback port, for the rendezvous and store benchmarks, the msrun it is
 * started from, and the CPU it uses. */
#ifndef MSR_BENCH_COORD_H
#define MSR_BENCH_COORD_H

#include <stddef.h>
#include <sys/types.h>

/* Starts msrun (the path of an msrun executable) as
 * `msrun coordinator --bind 127.0.0.1:0 --ready_fd 3 ARGS...` with
 * MSRUN_TOKEN=token, and waits up to 10 s for it to say its port. args ends
 * with NULL. Returns the coordinator's pid with *port_p set, or -1 (after
 * saying why on stderr, prefixed with who, and reaping the child). */
pid_t bench_coord_start(const char *who, const char *msrun, const char *token,
                        const char *const args[], int *port_p);

/* The msrun executable next to this program, in path (of n > 16 bytes):
 * 0, or -1 when this program's own path cannot be read. */
int bench_msrun_beside(char *path, size_t n);

/* The CPU time (user + system) process pid has used, in milliseconds; -1
 * if unknown. */
double bench_cpu_ms(pid_t pid);

#endif
