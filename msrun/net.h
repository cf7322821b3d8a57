/* Address helpers for the agent: is an address this host's, which address
 * do peers reach us at, which port is free. */
#ifndef MSR_MSRUN_NET_H
#define MSR_MSRUN_NET_H

#include <stddef.h>

/* Resolves host (a name, or an IPv4 or IPv6 literal without brackets) to
 * an address's text in out: a name's IPv4 address when it has one, else
 * its IPv6 one. Returns 0 on success, -1 with msr_err_msg() saying why. */
int msr_net_resolve(const char *host, char *out, size_t len);

/* Whether the address (IPv4 or IPv6 text) belongs to this host: loopback
 * or an address of one of its interfaces. */
int msr_net_is_local(const char *ip);

/* The local address this host uses to reach ip:port (no packet is sent);
 * "127.0.0.1" or "::1" for loopback targets. Returns 0 on success. */
int msr_net_outward(const char *ip, int port, char *out, size_t len);

/* A TCP port that is free on ip right now (0 on failure). */
int msr_net_free_port(const char *ip);

/* "ip:port", or "[ip]:port" for an IPv6 address (one already in brackets
 * keeps them). */
void msr_net_join(const char *ip, int port, char *out, size_t len);

#endif
