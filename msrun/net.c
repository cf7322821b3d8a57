/* Address helpers for the agent. */
#include "msrun/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int msr_net_resolve(const char *host, char *out, size_t len)
{
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) == 1) {
        snprintf(out, len, "%s", host);
        return 0;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(out, len, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    struct sockaddr_in *sin = (struct sockaddr_in *)res->ai_addr;
    inet_ntop(AF_INET, &sin->sin_addr, out, (socklen_t)len);
    freeaddrinfo(res);
    return 0;
}

int msr_net_is_local(const char *ip)
{
    struct in_addr a;
    if (inet_pton(AF_INET, ip, &a) != 1)
        return 0;
    if ((ntohl(a.s_addr) >> 24) == 127)
        return 1;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return 0;
    int local = 0;
    for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)i->ifa_addr;
            local = sin->sin_addr.s_addr == a.s_addr;
        }
    }
    freeifaddrs(ifs);
    return local;
}

int msr_net_outward(const char *ip, int port, char *out, size_t len)
{
    struct sockaddr_in to;
    memset(&to, 0, sizeof to);
    to.sin_family = AF_INET;
    to.sin_port = htons((uint16_t)(port > 0 ? port : 9));
    if (inet_pton(AF_INET, ip, &to.sin_addr) != 1)
        return -1;
    if ((ntohl(to.sin_addr.s_addr) >> 24) == 127) {
        snprintf(out, len, "127.0.0.1");
        return 0;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    int rc = -1;
    if (connect(fd, (struct sockaddr *)&to, sizeof to) == 0 &&
        getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
        inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)len) != NULL)
        rc = 0;
    close(fd);
    return rc;
}

int msr_net_free_port(const char *ip)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    if (ip == NULL || inet_pton(AF_INET, ip, &a.sin_addr) != 1)
        a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t al = sizeof a;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}
