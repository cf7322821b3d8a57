/* A worker that only burns its CPU, as a rank busy-waiting in a collective
 * does: spins until the file given as the first argument exists, or for
 * the seconds given as the second at most; exits 0 either way (the
 * oversubscription test). No libmsrun: msrun sees a plain program. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: spin_worker STOP_FILE MAX_SECONDS\n");
        return 2;
    }
    double end = now_s() + atof(argv[2]);
    struct stat st;
    while (stat(argv[1], &st) != 0 && now_s() < end)
        for (volatile unsigned i = 0; i < 200000; i++)
            ;
    return 0;
}
