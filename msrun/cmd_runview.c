/* `msrun board DIR...`: a finished run's history (history.h), or several
 * runs side by side, as one self-contained HTML page: the dashboard's page
 * with the runs' JSON lines embedded, drawn by the browser with no server
 * (docs/usage.md says why a file). */
#include "launcher/commands.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/optparse.h"
#include "base/status.h"
#include "base/util.h"
#include "cluster/page.h"
#include "launcher/history.h"

/* The most history one run may bring (both files together). */
#define RUNVIEW_RUN_MAX_BYTES (512ll * 1024 * 1024)
/* Where the page takes the runs' data. */
#define RUNVIEW_MARK          "<!--msrun-board-data-->"

typedef struct runview_args {
    char *out;
} runview_args_t;

#define A(field) MSR_OPT_DEST(runview_args_t, field)

/* clang-format off */
static const msr_opt_t runview_opts[] = {
    {.name = "out", .kind = MSR_OPT_STRING, .dest = A(out), .metavar = "FILE",
     .def = "board.html in the first DIR",
     .help = "write the page to FILE (replaced if it exists; mode 0600)."},
};
/* clang-format on */

static const msr_optset_t runview_set = {"msrun board", runview_opts, MSR_ARRAY_SIZE(runview_opts),
                                         1};

static void runview_usage(FILE *out)
{
    fprintf(out, "usage: msrun board [--out FILE] DIR [DIR...]\n"
                 "\n"
                 "Draws the history of finished (or running) jobs as one HTML page that opens\n"
                 "in any browser without a server: every reported scalar in a chart, every rank\n"
                 "in it (a min/median/max band past 8 ranks), restarts marked, the runs side\n"
                 "by side. DIR is a run's directory in --log_dir (its history.jsonl), or the\n"
                 "--log_dir itself (its latest run).\n"
                 "\n"
                 "Exit status: 0 when written, 1 when a history cannot be read or the page\n"
                 "cannot be written, 2 for bad input.\n"
                 "\n"
                 "options:\n");
    msr_opts_usage(&runview_set, out);
}

/* Appends the file dir/name to b, if it exists: 0, or -1 after saying why. */
static int read_into(const char *dir, const char *name, msr_buf_t *b, int *found)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
        fprintf(stderr, "msrun board: error: %s: the path is too long\n", dir);
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return 0;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "msrun board: error: cannot read %s: %s\n", path,
                fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int r = 0;
    if ((int64_t)b->len + st.st_size > RUNVIEW_RUN_MAX_BYTES) {
        fprintf(stderr, "msrun board: error: %s: more than %lld MiB of history in one run\n", path,
                RUNVIEW_RUN_MAX_BYTES >> 20);
        r = -1;
    }
    char chunk[65536];
    while (r == 0) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fprintf(stderr, "msrun board: error: cannot read %s: %s\n", path, strerror(errno));
        if (n < 0 || (n > 0 && msr_buf_append(b, chunk, (size_t)n) != MSR_OK))
            r = -1;
        if (n <= 0)
            break;
    }
    close(fd);
    *found = 1;
    return r;
}

/* A JSON string of s that is safe inside a <script> element: every '<',
 * '>' and '&' escaped too, so nothing a worker named can end it. */
static msr_status_t json_script_string(msr_buf_t *b, const char *s, size_t len)
{
    msr_status_t st = msr_buf_append(b, "\"", 1);
    for (size_t i = 0; i < len && st == MSR_OK; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            st = msr_buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f)
            st = msr_buf_printf(b, "\\u%04x", c);
        else
            st = msr_buf_append(b, s + i, 1);
    }
    return st == MSR_OK ? msr_buf_append(b, "\"", 1) : st;
}

/* A run's directory: dir itself when it holds a history, else its latest
 * run (dir being a --log_dir). Reads the history (the rotated file first)
 * and appends {"name":..,"history":..} to out: 0, or 1 after saying why. */
static int add_run(const char *dir, msr_buf_t *out, int first)
{
    char latest[PATH_MAX];
    const char *d = dir;
    msr_buf_t h = MSR_BUF_INIT;
    int found = 0, r = 1;
    struct stat sb;
    int missing = stat(dir, &sb) != 0;
    if (missing || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "msrun board: error: %s: %s\n", dir,
                missing ? strerror(errno) : "not a directory");
        return 1;
    }
    if (read_into(d, MSR_HISTORY_FILE_OLD, &h, &found) != 0 ||
        read_into(d, MSR_HISTORY_FILE, &h, &found) != 0)
        goto out;
    if (!found && (size_t)snprintf(latest, sizeof latest, "%s/latest", dir) < sizeof latest) {
        d = latest;
        if (read_into(d, MSR_HISTORY_FILE_OLD, &h, &found) != 0 ||
            read_into(d, MSR_HISTORY_FILE, &h, &found) != 0)
            goto out;
    }
    if (!found) {
        fprintf(stderr,
                "msrun board: error: no run history in %s: it is written as %s in a run's "
                "directory of msrun's --log_dir\n",
                dir, MSR_HISTORY_FILE);
        goto out;
    }
    char real[PATH_MAX];
    const char *name = realpath(d, real) ? real : d;
    const char *slash = strrchr(name, '/');
    if (slash && slash[1])
        name = slash + 1;
    msr_status_t st = msr_buf_printf(out, "%s{\"name\":", first ? "" : ",");
    if (st == MSR_OK)
        st = json_script_string(out, name, strlen(name));
    if (st == MSR_OK)
        st = msr_buf_append(out, ",\"history\":", 11);
    if (st == MSR_OK)
        st = json_script_string(out, h.data ? h.data : "", h.len);
    if (st == MSR_OK)
        st = msr_buf_append(out, "}", 1);
    if (st != MSR_OK)
        fprintf(stderr, "msrun board: error: out of memory for %s's history\n", dir);
    r = st == MSR_OK ? 0 : 1;
out:
    msr_buf_cleanup(&h);
    return r;
}

/* Writes page to path through a temporary file renamed over it (mode
 * 0600): 0, or 1 after saying why. */
static int write_page(const char *path, const msr_buf_t *page)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >= sizeof tmp) {
        fprintf(stderr, "msrun board: error: %s: the path is too long\n", path);
        return 1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "msrun board: error: cannot write %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    int ok = msr_write_all(fd, page->data, page->len) == MSR_OK;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "msrun board: error: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
}

/* The page, its mark replaced by the runs' data. */
static int runview_run(const runview_args_t *a, int ndirs, char **dirs)
{
    msr_buf_t data = MSR_BUF_INIT, page = MSR_BUF_INIT;
    int r = 1;
    time_t now = time(NULL);
    char when[64] = "";
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    if (msr_buf_printf(&data,
                       "<script id=\"msrun-board\" type=\"application/json\">"
                       "{\"written\":\"%s\",\"runs\":[",
                       when) != MSR_OK)
        goto out;
    for (int i = 0; i < ndirs; i++)
        if (add_run(dirs[i], &data, i == 0) != 0)
            goto out;
    const char *html = (const char *)msr_page_index;
    const char *mark = strstr(html, RUNVIEW_MARK);
    if (mark == NULL) {
        fprintf(stderr, "msrun board: error: this msrun's page has no place for the data\n");
        goto out;
    }
    size_t head = (size_t)(mark - html), tail = strlen(RUNVIEW_MARK);
    if (msr_buf_append(&data, "]}</script>", 11) != MSR_OK ||
        msr_buf_append(&page, html, head) != MSR_OK ||
        msr_buf_append(&page, data.data, data.len) != MSR_OK ||
        msr_buf_append(&page, mark + tail, msr_page_index_len - head - tail) != MSR_OK) {
        fprintf(stderr, "msrun board: error: out of memory for the page\n");
        goto out;
    }
    char def[PATH_MAX];
    const char *path = a->out;
    if (path == NULL) {
        if ((size_t)snprintf(def, sizeof def, "%s/board.html", dirs[0]) >= sizeof def) {
            fprintf(stderr, "msrun board: error: %s: the path is too long\n", dirs[0]);
            goto out;
        }
        path = def;
    }
    if (write_page(path, &page) != 0)
        goto out;
    printf("msrun board: wrote %s (%d run%s): open it in a browser\n", path, ndirs,
           ndirs == 1 ? "" : "s");
    r = 0;
out:
    msr_buf_cleanup(&data);
    msr_buf_cleanup(&page);
    return r;
}

int msr_board_main(int argc, char **argv)
{
    runview_args_t a = {0};
    unsigned char seen[MSR_ARRAY_SIZE(runview_opts)];
    int next, r = 2;
    switch (msr_opts_parse(&runview_set, argc, argv, &a, seen, &next)) {
    case MSR_OPTS_HELP:
        runview_usage(stdout);
        r = 0;
        break;
    case MSR_OPTS_OK:
        if (next >= argc) {
            fprintf(stderr, "msrun board: error: a run's directory is needed: msrun board DIR "
                            "[DIR...]\n");
            break;
        }
        r = runview_run(&a, argc - next, argv + next);
        break;
    default:
        msr_opts_print_error(&runview_set);
        break;
    }
    msr_opts_free(&runview_set, &a);
    return r;
}
