/* One table-driven command-line parser: each option's name, kind, bounds,
 * environment variable and destination live in a table, so the commands
 * built on it (msrun, `msrun coordinator`, `msrun status`) share one syntax
 * and one set of bounds, and so do train_gpt and plan_gpt. It never exits
 * or prints on its own: a result says what was found, and the caller
 * decides what to print and how to end.
 * Not thread-safe for one set of objects; errors go to this thread's error
 * text (base/err.h). */
#ifndef MSR_BASE_OPTPARSE_H
#define MSR_BASE_OPTPARSE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "msrun/base.h"

/* What an option's value is and where it goes (dest: the option's field in
 * the command's struct, size: that field's size). */
typedef enum msr_opt_kind {
    MSR_OPT_INT,      /* integer in [min, max], or one of choices (if any) stored as -1 - its
                         index; int or int64_t */
    MSR_OPT_REAL,     /* number in [real_min, real_max]; double */
    MSR_OPT_PORT,     /* port number in [min, max]; int */
    MSR_OPT_SECONDS,  /* seconds, stored as milliseconds in [min, max]; int64_t */
    MSR_OPT_SIZE,     /* bytes with K, M, G suffixes, in [min, max]; int64_t */
    MSR_OPT_BOOL,     /* "--name" alone is true; a value only as --name=1/0, true/false...; int */
    MSR_OPT_LEVEL,    /* a log level (error, warn, info, debug); int */
    MSR_OPT_ENUM,     /* one of choices, stored as its index; int */
    MSR_OPT_STRING,   /* a non-empty string, copied; char * the caller frees */
    MSR_OPT_TEXT,     /* a non-empty string, not copied; const char * into argv or environ */
    MSR_OPT_SECRET,   /* a STRING whose command-line bytes are hidden from ps */
    MSR_OPT_PATH,     /* a STRING naming a file this process can read */
    MSR_OPT_RANGE,    /* N or MIN:MAX with min <= MIN <= MAX <= max; int at dest, int at dest2 */
    MSR_OPT_HOSTPORT, /* HOST:PORT with PORT in [min, max]; char * at dest, int at dest2 */
    MSR_OPT_HELP,     /* -h and --help as a row of the usage (--help is always known); no dest */
    /* a non-empty string that may be given many times, each appended (the
     * environment variable gives one); char ** NULL-terminated, the caller
     * frees it with msr_opts_free */
    MSR_OPT_LIST,
} msr_opt_kind_t;

/* flags */
#define MSR_OPT_ZERO_OFF   1 /* SECONDS: 0 (off) is valid as well as [min, max] */
#define MSR_OPT_NO_VALUE   2 /* BOOL: only "--name" (true); "--name=V" is refused */
#define MSR_OPT_MIN_OPEN   4 /* REAL: real_min itself is out: (real_min, real_max] */
/* MSR_OPTS_USAGE_LINE: the option is shown outside brackets (a command's
 * main options), or inside the previous option's brackets (used together) */
#define MSR_OPT_USAGE_BARE 8
#define MSR_OPT_USAGE_JOIN 16

typedef struct msr_opt {
    const char *name;       /* with underscores; '-' and '_' match alike */
    const char *aliases[3]; /* other names (torchrun's, older ones) */
    msr_opt_kind_t kind;
    int64_t min, max;          /* bounds of INT, PORT, SECONDS (ms), SIZE, RANGE; HOSTPORT's port */
    const char *env;           /* read when the option is not on the command line; NULL: none */
    size_t dest, size;         /* the field's offset and size (MSR_OPT_DEST) */
    size_t dest2;              /* RANGE's MAX, HOSTPORT's port */
    double real_min, real_max; /* REAL's bounds */
    int flags;                 /* MSR_OPT_ZERO_OFF, ... */
    int group;                 /* nonzero: options of one group exclude each other */
    const char *const *choices; /* ENUM (INT: words besides numbers): NULL-terminated */
    /* for --help */
    const char *def;     /* the default as shown; NULL: none shown */
    const char *metavar; /* NULL: takes no value in the usage line (BOOL) */
    const char *help;
} msr_opt_t;

#define MSR_OPT_DEST(type, field) offsetof(type, field), sizeof(((type *)0)->field)

/* How msr_opts_usage lays out a command's options. */
typedef enum msr_opts_style {
    MSR_OPTS_USAGE_LIST,    /* a paragraph per option: its name, help, default and variable */
    MSR_OPTS_USAGE_COLUMNS, /* a line per option: "  --NAME  HELP", names in 14 columns */
    MSR_OPTS_USAGE_LINE,    /* one line: "usage: PROG --name METAVAR [--name METAVAR]..." */
} msr_opts_style_t;

/* A command: its table and how its arguments end. */
typedef struct msr_optset {
    const char *prog; /* "msrun", "msrun coordinator": starts every error line */
    const msr_opt_t *opts;
    size_t count;
    int positional;         /* options end at the first non-option or "--" (msrun's PROGRAM) */
    msr_opts_style_t style; /* of msr_opts_usage */
} msr_optset_t;

typedef enum msr_opts_result {
    MSR_OPTS_OK,      /* parsed; *next_p is the first argument that is not an option */
    MSR_OPTS_HELP,    /* -h or --help was given */
    MSR_OPTS_VERSION, /* --version was given */
    MSR_OPTS_BAD,     /* bad input: the reason is this thread's error text (base/err.h) */
} msr_opts_result_t;

/* Parses argv into obj (the command's struct, holding its defaults):
 * options from the command line, then the environment variables of options
 * not given there. "--name VALUE" and "--name=VALUE" are alike; an error
 * shows the value as it was given ("--seq x", "--seq=x", "VAR=x"). seen
 * (count entries) is set to 1 for an option given on the command line, 2
 * for one read from the environment, 0 otherwise. A command without
 * positional arguments refuses any. Strings already in obj
 * are freed when replaced; on MSR_OPTS_BAD obj may be partly written (free
 * it with msr_opts_free). */
msr_opts_result_t msr_opts_parse(const msr_optset_t *set, int argc, char **argv, void *obj,
                                 unsigned char *seen, int *next_p);

/* An unknown option's name is answered with the nearest known one: "did
 * you mean --NAME?" when it is within edit distance 2 of a name or an
 * alias ('-' and '_' alike, 1 for names of 3 or 4 characters, none for
 * shorter ones) or the start of one (3 characters at least). */

/* Prints "PROG: error: <this thread's error text> (see PROG --help)" to stderr. */
void msr_opts_print_error(const msr_optset_t *set);

/* Prints the options in set->style: MSR_OPTS_USAGE_LIST's name, aliases,
 * help wrapped at 76 columns, default and environment variable; COLUMNS'
 * name and help; LINE's synopsis (metavars, brackets by the
 * MSR_OPT_USAGE_* flags, no help). The caller prints any header. */
void msr_opts_usage(const msr_optset_t *set, FILE *out);

/* Frees the strings the table's STRING, SECRET, PATH, HOSTPORT and LIST options
 * put in obj (a SECRET is wiped first) and sets them to NULL; TEXT's are
 * the caller's. */
void msr_opts_free(const msr_optset_t *set, void *obj);

/* Splits "HOST:PORT" ("[v6]:PORT") into *host_p (msr_malloc'ed, replacing
 * what was there) and *port_p (min..max); w names the value's source in
 * the error (msr_err_msg()). */
msr_status_t msr_opts_hostport(const char *v, const char *w, int64_t min, int64_t max,
                               char **host_p, int *port_p);

/* The index of the option called name in set, or -1. */
int msr_opts_find(const msr_optset_t *set, const char *name);

/* Where option name's value came from, for messages: its environment
 * variable when seen[] says so, else "--name" written to buf. */
const char *msr_opts_where(const msr_optset_t *set, const unsigned char *seen, const char *name,
                           char *buf, size_t len);

/* Hides a secret given on the command line in the memory the kernel shows
 * in /proc/PID/cmdline (and ps): arg is the argv string that held it; with
 * after_eq the part after its first '=' ("--token=S"), else all of it (the
 * value after "--token") becomes "***" and the rest of the string NULs. The
 * caller copies the value first and passes only the arguments it parsed as
 * a secret (never a program's). msr_opts_parse does this for every SECRET
 * option. */
void msr_opts_scrub_arg(char *arg, int after_eq);

#endif
