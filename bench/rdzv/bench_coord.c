/* Benchmarks' coordinator: start `msrun coordinator` and read its port;
 * find msrun; read a process's CPU time. */
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

int bench_msrun_beside(char *path, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", path, n - 16);
    if (len <= 0)
        return -1;
    path[len] = '\0';
    char *slash = strrchr(path, '/');
    snprintf(slash + 1, n - (size_t)(slash + 1 - path), "msrun");
    return 0;
}

double bench_cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}
