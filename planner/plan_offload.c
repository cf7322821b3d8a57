/* The offloads as the planner takes them (plan.h): train_gpt's --offload
 * list read into MSR_PLAN_OFFLOAD_* bits. The bytes each keeps resident
 * are plan_mem.c's. */
#include <stdio.h>
#include <string.h>

#include "planner/plan.h"

#define BAD(...)                             \
    do {                                     \
        snprintf(why, why_len, __VA_ARGS__); \
        return -1;                           \
    } while (0)

static const char *const names[2] = {"optimizer", "activations"};

/* The name at p (0, 1), or -1; *len_p its length. A name ends the item or
 * is followed by '=' or ','. */
static int name_at(const char *p, size_t *len_p)
{
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(names[k]);
        if (strncmp(p, names[k], n) == 0 && (p[n] == '\0' || p[n] == '=' || p[n] == ',')) {
            *len_p = n;
            return k;
        }
    }
    return -1;
}

/* Where the item at p ends: at a comma that starts the next name (so a
 * directory may hold commas), or at the end. */
static const char *item_end(const char *p)
{
    size_t n;
    for (const char *c = strchr(p, ','); c != NULL; c = strchr(c + 1, ','))
        if (name_at(c + 1, &n) >= 0)
            return c;
    return p + strlen(p);
}

int msr_plan_offload_parse(const char *s, int *offload_p, char *why, size_t why_len)
{
    int bits = 0, seen = 0;
    for (const char *p = s;;) {
        size_t n;
        int k = name_at(p, &n);
        const char *end = item_end(p);
        int len = (int)(end - p);
        if (k < 0)
            BAD("--offload '%s': '%.*s' is not optimizer or activations", s, len, p);
        if (seen & (1 << k))
            BAD("--offload '%s': %s named twice", s, names[k]);
        seen |= 1 << k;
        const char *mode = p + n;
        int rest = (int)(end - mode);
        if (rest == 0 || (rest == 5 && strncmp(mode, "=disk", 5) == 0) ||
            (rest > 6 && strncmp(mode, "=disk:", 6) == 0))
            bits |= k == 0 ? MSR_PLAN_OFFLOAD_OPTIM : MSR_PLAN_OFFLOAD_ACTS;
        else if (k == 0 && rest == 5 && strncmp(mode, "=host", 5) == 0)
            ; /* a CPU rank's moments stay in memory: nothing moves */
        else
            BAD("--offload '%s': '%.*s' is not %s, %s=disk or %s=disk:DIR%s", s, len, p, names[k],
                names[k], names[k], k == 0 ? " (or optimizer=host)" : "");
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *offload_p = bits;
    return 0;
}
