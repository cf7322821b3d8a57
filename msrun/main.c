/* msrun: the per-node launcher. */
#include <stdio.h>
#include <string.h>

#include "base/time.h"

#include "launcher/agent.h"
#include "launcher/commands.h"
#include "launcher/options.h"
#include "launcher/remote.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "coordinator") == 0)
        return msr_coordinator_main(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "status") == 0)
        return msr_status_main(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "dashboard") == 0)
        return msr_dashboard_main(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "board") == 0)
        return msr_board_main(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "relay") == 0)
        return msr_relay_main(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "ckpt") == 0)
        return msr_ckpt_cmd_main(argc - 2, argv + 2);
    uint64_t start_ns = msr_now_ns(); /* --profile_launch's zero */
    msr_options_t opts;
    int r = msr_options_parse(argc - 1, argv + 1, &opts);
    opts.start_ns = start_ns;
    if (r != 0) {
        msr_options_cleanup(&opts);
        return r == 1 ? 0 : 2;
    }
    if (opts.hostfile || opts.hosts) { /* the whole job from here, over ssh */
        int rc = msr_remote_run(&opts, argc - 1, argv + 1);
        msr_options_cleanup(&opts);
        return rc;
    }
    if (opts.dry_run) {
        msr_options_print_resolved(&opts, stdout);
        msr_options_cleanup(&opts);
        return 0;
    }
    int rc = msr_agent_run(&opts);
    msr_options_cleanup(&opts);
    return rc;
}
