/* Address helpers for the agent: IPv4 and IPv6 alike. */
#include "launcher/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/err.h"

/* ip as a socket address (no name lookup); 0 if it is an IP literal. */
static int to_sockaddr(const char *ip, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        return 0;
    }
    if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof *v6;
        return 0;
    }
    return -1;
}

static int is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) ||
           (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127); /* ::ffff:127.x */
}

static int lookup(const char *host, int family, char *out, size_t len, int *gai)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    *gai = getaddrinfo(host, NULL, &hints, &res);
    if (*gai != 0 || res == NULL)
        return -1;
    const void *addr = family == AF_INET
                           ? (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr
                           : (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr;
    int rc = inet_ntop(family, addr, out, (socklen_t)len) ? 0 : -1;
    freeaddrinfo(res);
    return rc;
}

int msr_net_resolve(const char *host, char *out, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (to_sockaddr(host, 0, &ss, &sl) == 0) {
        snprintf(out, len, "%s", host);
        return 0;
    }
    /* IPv4 first: a name with both kinds of address (localhost) keeps the
     * address every earlier msrun used */
    int gai4, gai6;
    if (lookup(host, AF_INET, out, len, &gai4) == 0 || lookup(host, AF_INET6, out, len, &gai6) == 0)
        return 0;
    msr_err_set("cannot resolve '%s': %s", host,
                gai_strerror(gai4 != EAI_NONAME && gai4 != EAI_ADDRFAMILY ? gai4 : gai6));
    return -1;
}

int msr_net_is_local(const char *ip)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (to_sockaddr(ip, 0, &ss, &sl) != 0)
        return 0;
    if (is_loopback(&ss))
        return 1;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return 0;
    int local = 0;
    for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != ss.ss_family)
            continue;
        if (ss.ss_family == AF_INET)
            local = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                    ((struct sockaddr_in *)&ss)->sin_addr.s_addr;
        else
            local = memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                           &((struct sockaddr_in6 *)&ss)->sin6_addr, sizeof(struct in6_addr)) == 0;
    }
    freeifaddrs(ifs);
    return local;
}

int msr_net_outward(const char *ip, int port, char *out, size_t len)
{
    struct sockaddr_storage to, me;
    socklen_t tl, ml = sizeof me;
    if (to_sockaddr(ip, port > 0 ? port : 9, &to, &tl) != 0)
        return -1;
    if (is_loopback(&to)) {
        snprintf(out, len, "%s", to.ss_family == AF_INET ? "127.0.0.1" : "::1");
        return 0;
    }
    int fd = socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc = -1;
    if (connect(fd, (struct sockaddr *)&to, tl) == 0 &&
        getsockname(fd, (struct sockaddr *)&me, &ml) == 0) {
        const void *a = me.ss_family == AF_INET
                            ? (const void *)&((struct sockaddr_in *)&me)->sin_addr
                            : (const void *)&((struct sockaddr_in6 *)&me)->sin6_addr;
        if (inet_ntop(me.ss_family, a, out, (socklen_t)len) != NULL)
            rc = 0;
    }
    close(fd);
    return rc;
}

int msr_net_free_port(const char *ip)
{
    struct sockaddr_storage a;
    socklen_t al;
    if (ip == NULL || to_sockaddr(ip, 0, &a, &al) != 0)
        to_sockaddr("0.0.0.0", 0, &a, &al);
    int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, al) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                            : ((struct sockaddr_in6 *)&a)->sin6_port);
    close(fd);
    return port;
}

void msr_net_join(const char *ip, int port, char *out, size_t len)
{
    if (strchr(ip, ':') && ip[0] != '[')
        snprintf(out, len, "[%s]:%d", ip, port);
    else
        snprintf(out, len, "%s:%d", ip, port);
}
