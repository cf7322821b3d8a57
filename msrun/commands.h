/* msrun's subcommands, each a program of its own: main() hands them the
 * arguments after the subcommand's name. */
#ifndef MSR_MSRUN_COMMANDS_H
#define MSR_MSRUN_COMMANDS_H

/* `msrun coordinator ...`: a standalone (or embedded) coordinator; returns
 * its exit status. */
int msr_coordinator_main(int argc, char **argv);

/* `msrun status ...`: prints the job's members and state; returns the
 * exit status. */
int msr_status_main(int argc, char **argv);

/* `msrun dashboard ...`: a new login URL for a running job's dashboard;
 * returns the exit status. */
int msr_dashboard_main(int argc, char **argv);

/* `msrun board DIR...`: the runs' history as one HTML page; returns the
 * exit status. */
int msr_board_main(int argc, char **argv);

/* `msrun ckpt ...`: executes msrun-ckpt (programs/ckpt) from msrun's own
 * folder with the arguments; returns only when that fails (2, the reason
 * on stderr). */
int msr_ckpt_cmd_main(int argc, char **argv);

/* `msrun relay ...`: a relay agent between nodes and the coordinator
 * (docs/architecture.md, "Relays"); returns its exit status. */
int msr_relay_main(int argc, char **argv);

#endif
