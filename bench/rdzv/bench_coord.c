/* Benchmarks' coordinator: start `msrun coordinator` and read its port. */
#include "bench_coord.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t bench_coord_start(const char *who, const char *msrun, const char *token,
                        const char *const args[], int *port_p)
{
    char *argv[48] = {"msrun", "coordinator", "--bind", "127.0.0.1:0", "--ready_fd", "3"};
    int k = 6;
    for (int i = 0; args[i] && k < 47; i++)
        argv[k++] = (char *)args[i];
    argv[k] = NULL;
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 3);
        setenv("MSRUN_TOKEN", token, 1);
        execv(msrun, argv);
        _exit(127);
    }
    close(fds[1]);
    char line[128] = "";
    size_t got = 0;
    while (got < sizeof line - 1) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, 10000) <= 0)
            break;
        ssize_t n = read(fds[0], line + got, sizeof line - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (memchr(line, '\n', got))
            break;
    }
    close(fds[0]);
    line[got] = '\0';
    if (sscanf(line, "port %d", port_p) != 1) {
        fprintf(stderr, "%s: the coordinator did not start: %s\n", who, line);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}
