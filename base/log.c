/* Logging to stderr with the process's identity on every line. */
#include "base/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

msr_log_level_t msr_log_level_ = MSR_LOG_WARN;
static char log_identity[96] = "msrun";

static const char *const level_names[] = {"error", "warning", "info", "debug", "trace"};

int msr_log_level_parse(const char *text)
{
    static const char *const short_names[] = {"error", "warn", "info", "debug", "trace"};
    if (text == NULL || *text == '\0')
        return -1;
    if (isdigit((unsigned char)text[0]) && text[1] == '\0') {
        int v = text[0] - '0';
        return v <= MSR_LOG_TRACE ? v : -1;
    }
    for (int i = 0; i <= MSR_LOG_TRACE; i++)
        if (strcasecmp(text, short_names[i]) == 0 || strcasecmp(text, level_names[i]) == 0)
            return i;
    return -1;
}

void msr_log_set_level(msr_log_level_t level)
{
    if ((int)level < MSR_LOG_ERROR)
        level = MSR_LOG_ERROR;
    if (level > MSR_LOG_TRACE)
        level = MSR_LOG_TRACE;
    msr_log_level_ = level;
}

void msr_log_init(const char *prog, int node, int rank)
{
    const char *env = getenv("MSR_LOG_LEVEL");
    int lvl = msr_log_level_parse(env);
    if (lvl >= 0)
        msr_log_level_ = (msr_log_level_t)lvl;
    if (prog == NULL)
        prog = "msrun";
    if (node >= 0 && rank >= 0)
        snprintf(log_identity, sizeof log_identity, "%s[node %d rank %d]", prog, node, rank);
    else if (node >= 0)
        snprintf(log_identity, sizeof log_identity, "%s[node %d]", prog, node);
    else if (rank >= 0)
        snprintf(log_identity, sizeof log_identity, "%s[rank %d]", prog, rank);
    else
        snprintf(log_identity, sizeof log_identity, "%s", prog);
}

static void (*log_sink)(void *, const char *, size_t);
static void *log_sink_arg;

void msr_log_set_sink(void (*sink)(void *arg, const char *line, size_t len), void *arg)
{
    log_sink_arg = arg;
    log_sink = sink;
}

void msr_log_write(msr_log_level_t level, const char *fmt, ...)
{
    char line[2048];
    int saved = errno;
    int n = snprintf(line, sizeof line, "%s %s: ", log_identity,
                     level_names[level <= MSR_LOG_TRACE ? level : MSR_LOG_TRACE]);
    if (n < 0)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    if (log_sink) {
        log_sink(log_sink_arg, line, len);
        errno = saved;
        return;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(STDERR_FILENO, line + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    errno = saved;
}
