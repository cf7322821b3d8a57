/* What the files of msrun's command line share (options.c, the table and
 * parsing; options_check.c, the checks; options_derive.c, the derived
 * settings). The steps run in msr_options_parse's order; each prints its
 * one error line ("msrun: error: ...") and returns nonzero on bad input. */
#ifndef MSR_MSRUN_OPTIONS_IMPL_H
#define MSR_MSRUN_OPTIONS_IMPL_H

#include "launcher/options.h"
#include "launcher/sched.h"

/* msrun's option table. */
extern const msr_optset_t msr_options_set;
/* --bind_to's values, in msr_bind_t's order; --rdzv_backend's, in
 * msr_rdzv_backend_t's. */
extern const char *const msr_options_bind_choices[];
extern const char *const msr_options_rdzv_choices[];
/* --nproc_per_node's words, in msr_nproc_word_t's order */
extern const char *const msr_options_nproc_words[];

/* Prints "msrun: error: <message> (see msrun --help)" to stderr. */
void msr_options_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Replaces *slot with a copy of v; -1 (printed) when out of memory. */
int msr_options_set_string(char **slot, const char *v);

/* options_derive.c, in this order. seen: msr_opts_parse's. */
/* --master_addr=HOST:PORT split into master_addr and master_port. */
int msr_options_split_master_addr(msr_options_t *o, const unsigned char *seen);
/* --rdzv_endpoint into master_addr/port (static) or etcd's endpoints. */
int msr_options_resolve_rdzv(msr_options_t *o, const unsigned char *seen);
/* The scheduler's settings where the options left defaults; *s_p gets
 * what the scheduler said, for msr_options_derive_counts. */
int msr_options_apply_sched(msr_options_t *o, const unsigned char *seen, msr_sched_t *s_p);
/* The worker and node counts, derived and checked against each other. */
int msr_options_derive_counts(msr_options_t *o, const msr_sched_t *s);
/* The origins of what msr_options_derive_counts filled in. */
void msr_options_origins_derived(msr_options_t *o);

/* options_habits.c: torchrun's and mpirun's options (issue 39). */
/* --rdzv_conf's keys into the options they mean, where those were not
 * given; --rdzv_backend=c10d to static. Before msr_options_apply_sched. */
int msr_options_apply_habits(msr_options_t *o, const unsigned char *seen);
/* --nproc_per_node's words and the default worker count (no count given:
 * auto). In msr_options_derive_counts, before the counts are derived. */
int msr_options_resolve_nproc(msr_options_t *o);
/* The torch port (--torch_port, else master_port + 1 when the user or a
 * scheduler chose master_port), checked free when this node is known to
 * host it; then -x's variables into msrun's environment, which the workers
 * inherit, and --monitor_interval's warning. Last, once all else passed. */
int msr_options_finish_habits(msr_options_t *o, const unsigned char *seen);

/* options_check.c: the checks of options against each other and of the
 * program, once all are known; flag is the boolean flag given alone just
 * before the program (or NULL), for the hint when PROGRAM looks like its
 * value. */
int msr_options_check_rest(msr_options_t *o, const char *flag);

/* Finds prog the way execvp would into *out_p, so a missing program is
 * refused before any worker starts; what names it in messages, flag is the
 * boolean flag given alone just before prog (or NULL), for the hint.
 * Returns 0, or -1 after printing why. */
int msr_options_find_program(const char *prog, const char *what, const char *flag, char **out_p);

#endif
