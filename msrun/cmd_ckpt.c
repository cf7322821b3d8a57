/* `msrun ckpt ...`: runs msrun-ckpt, the program next to msrun's own
 * executable (as git runs its subcommands), so the launcher links nothing
 * of the training runtime that reads checkpoints (docs/checkpoint.md). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launcher/commands.h"

int msr_ckpt_cmd_main(int argc, char **argv)
{
    char self[PATH_MAX], prog[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "msrun ckpt: cannot find msrun's own executable: %s\n", strerror(errno));
        return 2;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    snprintf(prog, sizeof prog, "%s/msrun-ckpt", self);
    char *args[64];
    if (argc > 62) {
        fprintf(stderr, "msrun ckpt: %d arguments: at most 62\n", argc);
        return 2;
    }
    int k = 0;
    args[k++] = prog;
    for (int i = 0; i < argc; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    execv(prog, args);
    fprintf(stderr, "msrun ckpt: cannot run %s: %s\n", prog, strerror(errno));
    return 2;
}
