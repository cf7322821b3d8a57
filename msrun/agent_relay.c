/* The agent's link to a relay (--relay, issue 40): opened with the loop's
 * other parts, closed once the node has left. Which calls go through it,
 * and the fall back to the coordinator when one fails, are agent_calls.c's
 * (the relay's side is rendezvous/relay.h, the command cmd_relay.c). */
#include <stdio.h>

#include "base/err.h"
#include "base/status.h"
#include "launcher/agent_impl.h"

int msr_agent_relay_open(agent_t *a)
{
    if (a->o->relay && msr_link_create(a->loop.base, a->o->relay, a->job.token, &a->job.tls,
                                       &a->relay_link) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the link to the relay %s: %s\n", a->o->relay,
                msr_err_msg());
        return 1;
    }
    return 0;
}

void msr_agent_relay_close(agent_t *a)
{
    msr_link_destroy(a->relay_link);
    a->relay_link = NULL;
}
