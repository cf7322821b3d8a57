/* --bind_core's shares of the allowed cores (see cpus.h). */
#include "msrun/cpus.h"

int msr_cpu_share(const cpu_set_t *allowed, int local_rank, int local_world, cpu_set_t *set)
{
    if (local_world < 1 || local_rank < 0 || local_rank >= local_world)
        return -1;
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, allowed))
            cpus[n++] = c;
    if (n == 0)
        return -1;
    CPU_ZERO(set);
    int share = n / local_world;
    if (share == 0) {
        CPU_SET(cpus[local_rank % n], set);
    } else {
        for (int i = 0; i < share; i++)
            CPU_SET(cpus[local_rank * share + i], set);
    }
    return 0;
}
