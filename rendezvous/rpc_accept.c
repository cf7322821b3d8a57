/* A plaintext gRPC server's own TCP listener, bounding its connections. */
#include "rendezvous/rpc_accept.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"

/* Refused connections are logged at most this often, with a count. */
#define REFUSED_LOG_INTERVAL_NS (5ull * 1000000000ull)

/* epoll's data for the two descriptors that are not connections. */
#define EV_LISTEN 0
#define EV_WAKE   1

/* One connection handed to gRPC. */
typedef struct conn {
    int dfd;              /* our duplicate, watched for the connection's end */
    int authed;           /* a call with the right token came on it */
    int expired;          /* shut down for staying unauthenticated */
    uint32_t gen;         /* bumped per use of the slot: stale events are told apart */
    uint64_t deadline_ns; /* unauthenticated: shut down then */
    msr_list_t unauth;    /* in the acceptor's unauth list while unauthenticated */
    char peer[80];        /* "ipv4:1.2.3.4:5678" */
    char host[64];        /* "1.2.3.4" */
} conn_t;

struct msr_rpc_acceptor {
    grpc_server *server;
    grpc_server_credentials *creds;
    msr_rpc_acceptor_config_t cfg;
    char log_name[64];
    int lfd, wake_fd, epfd, spare_fd;
    pthread_t thread;
    /* The connections; gfd[i] is the descriptor gRPC owns for slot i, -1
     * when free. The lock guards both arrays and the counts: the accepting
     * thread changes them, gRPC's polling thread marks connections. */
    pthread_mutex_t lock;
    int *gfd;
    conn_t *conns;
    int nunauth;
    /* Every step of a connection costs the same however many are held (a
     * scan of all of them per accept made connecting N nodes cost N^2):
     * slot_by_fd[fd] is 1 + the slot of gRPC's descriptor fd (0: none),
     * free_slots a stack of the free slots, unauth_list the
     * unauthenticated connections oldest first (their deadlines are in
     * that order), unauth_hosts each host's count of them (the map's
     * value is the count itself, never 0). */
    int *slot_by_fd;
    int nslot_by_fd;
    int *free_slots;
    int nfree;
    msr_list_t unauth_list;
    msr_map_t unauth_hosts;
    int count;
    /* accepting thread only */
    uint64_t refused, expired;
    uint64_t logged_ns;
};

/* "fd:12" -> 12; -1 for anything else. */
static int peer_fd(const char *peer)
{
    if (peer == NULL || strncmp(peer, "fd:", 3) != 0)
        return -1;
    char *end;
    long v = strtol(peer + 3, &end, 10);
    return end != peer + 3 && *end == '\0' && v >= 0 && v < INT32_MAX ? (int)v : -1;
}

/* The slot of gRPC's descriptor fd, or -1. Lock held. */
static int slot_of(const msr_rpc_acceptor_t *a, int fd)
{
    return fd >= 0 && fd < a->nslot_by_fd ? a->slot_by_fd[fd] - 1 : -1;
}

/* Unauthenticated connections from host now. Lock held. */
static int unauth_count(const msr_rpc_acceptor_t *a, const char *host)
{
    return (int)(uintptr_t)msr_map_get(&a->unauth_hosts, host);
}

/* Adds delta to host's count of unauthenticated connections (removing it
 * at 0); -1 when out of memory. Lock held. */
static int unauth_add(msr_rpc_acceptor_t *a, const char *host, int delta)
{
    int n = unauth_count(a, host) + delta;
    if (n <= 0) {
        msr_map_remove(&a->unauth_hosts, host);
        return 0;
    }
    return msr_map_put(&a->unauth_hosts, host, (void *)(uintptr_t)n, NULL) == MSR_OK ? 0 : -1;
}

/* Slot i's connection is no longer unauthenticated. Lock held. */
static void unauth_leave(msr_rpc_acceptor_t *a, int i)
{
    conn_t *c = &a->conns[i];
    if (c->authed)
        return;
    c->authed = 1;
    a->nunauth--;
    msr_list_remove(&c->unauth);
    unauth_add(a, c->host, -1);
}

void msr_rpc_acceptor_authenticated(msr_rpc_acceptor_t *a, const char *peer)
{
    int fd = peer_fd(peer);
    if (fd < 0)
        return;
    pthread_mutex_lock(&a->lock);
    if (a->nunauth > 0) {
        int i = slot_of(a, fd);
        if (i >= 0)
            unauth_leave(a, i);
    }
    pthread_mutex_unlock(&a->lock);
}

int msr_rpc_acceptor_peer(msr_rpc_acceptor_t *a, const char *peer, char *out, size_t outlen)
{
    int fd = peer_fd(peer);
    if (fd < 0)
        return -1;
    pthread_mutex_lock(&a->lock);
    int i = slot_of(a, fd);
    if (i >= 0)
        snprintf(out, outlen, "%s", a->conns[i].peer);
    pthread_mutex_unlock(&a->lock);
    return i >= 0 ? 0 : -1;
}

/* Frees slot i (its connection ended). Lock held. */
static void slot_free(msr_rpc_acceptor_t *a, int i)
{
    conn_t *c = &a->conns[i];
    epoll_ctl(a->epfd, EPOLL_CTL_DEL, c->dfd, NULL);
    close(c->dfd);
    unauth_leave(a, i);
    a->slot_by_fd[a->gfd[i]] = 0;
    a->gfd[i] = -1;
    a->free_slots[a->nfree++] = i;
    a->count--;
}

static void log_refused(msr_rpc_acceptor_t *a, const char *host, const char *why)
{
    a->refused++;
    uint64_t now = msr_now_ns();
    if (now - a->logged_ns < REFUSED_LOG_INTERVAL_NS)
        return;
    a->logged_ns = now;
    MSR_WARN("%s: closed %llu new connection%s (the last from %s: %s)", a->log_name,
             (unsigned long long)a->refused, a->refused == 1 ? "" : "s", host, why);
    a->refused = 0;
}

static void format_peer(const struct sockaddr_storage *ss, char *peer, size_t plen, char *host,
                        size_t hlen)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs(s4->sin_port);
        snprintf(peer, plen, "ipv4:%s:%d", ip, port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
        snprintf(peer, plen, "ipv6:[%s]:%d", ip, port);
    } else {
        snprintf(peer, plen, "unknown");
    }
    snprintf(host, hlen, "%s", ip);
}

/* Makes slot_by_fd cover descriptor fd; -1 when out of memory. Lock held. */
static int grow_slot_by_fd(msr_rpc_acceptor_t *a, int fd)
{
    int n = a->nslot_by_fd ? a->nslot_by_fd : 1024;
    while (n <= fd)
        n *= 2;
    int *m = msr_realloc_array(a->slot_by_fd, (size_t)n, sizeof *m);
    if (m == NULL)
        return -1;
    memset(m + a->nslot_by_fd, 0, (size_t)(n - a->nslot_by_fd) * sizeof *m);
    a->slot_by_fd = m;
    a->nslot_by_fd = n;
    return 0;
}

/* Takes one new connection; 0 to go on, -1 when none is waiting. */
static int accept_one(msr_rpc_acceptor_t *a)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(a->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED)
            return 0;
        if ((errno == EMFILE || errno == ENFILE) && a->spare_fd >= 0) {
            /* Out of descriptors: take the connection with the spare one
             * and close it, so the backlog keeps moving. */
            close(a->spare_fd);
            a->spare_fd = -1;
            fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0)
                close(fd);
            a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            log_refused(a, "?", "out of file descriptors");
            return fd >= 0 ? 0 : -1;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            MSR_DEBUG("%s: accept: %s", a->log_name, strerror(errno));
        return -1;
    }
    char peer[80], host[64];
    format_peer(&ss, peer, sizeof peer, host, sizeof host);
    pthread_mutex_lock(&a->lock);
    /* The descriptor number may be one gRPC closed a moment ago. */
    int stale = slot_of(a, fd);
    if (stale >= 0)
        slot_free(a, stale);
    const char *why = NULL;
    if (a->count >= a->cfg.max_total || a->nfree == 0)
        why = "the coordinator holds its most connections";
    else if (unauth_count(a, host) >= a->cfg.max_unauth_per_host)
        why = "too many connections from there without a valid call";
    else if (fd >= a->nslot_by_fd && grow_slot_by_fd(a, fd) != 0)
        why = "out of memory";
    else if (unauth_add(a, host, 1) != 0)
        why = "out of memory";
    int dfd = why ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (why == NULL && dfd < 0) {
        unauth_add(a, host, -1);
        why = "out of file descriptors";
    }
    int slot = why ? -1 : a->free_slots[--a->nfree];
    if (why) {
        pthread_mutex_unlock(&a->lock);
        close(fd);
        if (dfd >= 0)
            close(dfd);
        log_refused(a, host, why);
        return 0;
    }
    conn_t *c = &a->conns[slot];
    c->dfd = dfd;
    c->gen++;
    c->authed = 0;
    c->expired = 0;
    c->deadline_ns = msr_now_ns() + (uint64_t)a->cfg.grace_ms * 1000000ull;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    snprintf(c->host, sizeof c->host, "%s", host);
    a->gfd[slot] = fd;
    a->slot_by_fd[fd] = slot + 1;
    a->count++;
    a->nunauth++;
    msr_list_push_back(&a->unauth_list, &c->unauth);
    struct epoll_event ev = {.events = EPOLLRDHUP,
                             .data.u64 = ((uint64_t)c->gen << 32) | ((uint64_t)slot + 2)};
    if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, dfd, &ev) != 0)
        MSR_DEBUG("%s: epoll_ctl: %s", a->log_name, strerror(errno));
    pthread_mutex_unlock(&a->lock);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    grpc_server_add_channel_from_fd(a->server, fd, a->creds);
    return 0;
}

/* Shuts down the connections that stayed unauthenticated past their grace
 * period (gRPC then closes its side) and returns the milliseconds until
 * the next one is due (-1: none). */
static int expire(msr_rpc_acceptor_t *a)
{
    uint64_t now = msr_now_ns(), next = UINT64_MAX;
    pthread_mutex_lock(&a->lock);
    /* Oldest first: the first one not yet due ends the walk. An expired one
     * leaves the list but stays counted against its host until gRPC closes
     * it. */
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &a->unauth_list)
    {
        conn_t *c = MSR_CONTAINER_OF(pos, conn_t, unauth);
        if (c->deadline_ns > now) {
            next = c->deadline_ns;
            break;
        }
        shutdown(c->dfd, SHUT_RDWR);
        c->expired = 1;
        a->expired++;
        msr_list_remove(&c->unauth);
    }
    pthread_mutex_unlock(&a->lock);
    if (a->expired && now - a->logged_ns >= REFUSED_LOG_INTERVAL_NS) {
        a->logged_ns = now;
        MSR_WARN("%s: closed %llu connection%s that made no call with the job token within %d ms",
                 a->log_name, (unsigned long long)a->expired, a->expired == 1 ? "" : "s",
                 a->cfg.grace_ms);
        a->expired = 0;
    }
    if (next == UINT64_MAX)
        return -1;
    return (int)((next - now) / 1000000ull) + 1;
}

static void *accept_thread(void *arg)
{
    msr_rpc_acceptor_t *a = arg;
    struct epoll_event evs[64];
    for (;;) {
        int timeout = expire(a);
        int n = epoll_wait(a->epfd, evs, (int)MSR_ARRAY_SIZE(evs), timeout);
        if (n < 0 && errno != EINTR) {
            MSR_ERROR("%s: epoll_wait: %s", a->log_name, strerror(errno));
            return NULL;
        }
        for (int k = 0; k < n; k++) {
            uint64_t d = evs[k].data.u64;
            if (d == EV_WAKE)
                return NULL;
            if (d == EV_LISTEN) {
                for (int m = 0; m < 64 && accept_one(a) == 0; m++) {
                }
                continue;
            }
            pthread_mutex_lock(&a->lock);
            int i = (int)((d & 0xffffffffu) - 2);
            /* an event of the slot's previous connection, freed earlier in
             * this batch, is stale */
            if (a->gfd[i] >= 0 && a->conns[i].gen == (uint32_t)(d >> 32))
                slot_free(a, i);
            pthread_mutex_unlock(&a->lock);
        }
    }
}

/* Binds and listens on "host:port" or "[v6]:port". */
static msr_status_t listen_on(const char *address, int *fd_p, int *port_p)
{
    char host[256];
    const char *colon = strrchr(address, ':');
    if (colon == NULL)
        return MSR_ERR_INVALID_ARG;
    const char *h = address;
    size_t hl = (size_t)(colon - address);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl >= sizeof host)
        return MSR_ERR_INVALID_ARG;
    memcpy(host, h, hl);
    host[hl] = '\0';
    struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(hl ? host : NULL, colon + 1, &hints, &res) != 0 || res == NULL)
        return MSR_ERR_ADDR_IN_USE;
    /* One socket: a name such as "localhost" takes its IPv4 address (what
     * agents connect to); "[::]" listens on both families. */
    struct addrinfo *ai = res;
    for (struct addrinfo *p = res; p; p = p->ai_next) {
        if (p->ai_family == AF_INET) {
            ai = p;
            break;
        }
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        freeaddrinfo(res);
        return MSR_ERR_SYSTEM;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    /* A job's nodes connect in a burst: a connection the full backlog
     * drops costs its node a one-second SYN retransmission. The kernel caps
     * the backlog at net.core.somaxconn (raise it for jobs of thousands of
     * nodes, docs/performance.md). */
    int ok = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 65535) == 0;
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (!ok || getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        close(fd);
        return MSR_ERR_ADDR_IN_USE;
    }
    *port_p = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_p = fd;
    return MSR_OK;
}

msr_status_t msr_rpc_acceptor_start(grpc_server *server, const msr_rpc_acceptor_config_t *config,
                                    int *port_p, msr_rpc_acceptor_t **acceptor_p)
{
    if (config->max_total < 1 || config->max_unauth_per_host < 1 || config->grace_ms < 1)
        return MSR_ERR_INVALID_ARG;
    msr_rpc_acceptor_t *a = msr_calloc(1, sizeof *a);
    if (a == NULL)
        return MSR_ERR_NO_MEMORY;
    a->server = server;
    a->cfg = *config;
    snprintf(a->log_name, sizeof a->log_name, "%s", config->log_name ? config->log_name : "server");
    a->cfg.log_name = a->log_name;
    a->lfd = a->wake_fd = a->epfd = a->spare_fd = -1;
    pthread_mutex_init(&a->lock, NULL);
    msr_status_t st = MSR_ERR_NO_MEMORY;
    a->gfd = msr_malloc((size_t)config->max_total * sizeof *a->gfd);
    a->conns = msr_calloc((size_t)config->max_total, sizeof *a->conns);
    a->free_slots = msr_malloc((size_t)config->max_total * sizeof *a->free_slots);
    msr_list_init(&a->unauth_list);
    a->unauth_hosts = (msr_map_t)MSR_MAP_INIT;
    if (a->gfd == NULL || a->conns == NULL || a->free_slots == NULL)
        goto err_free;
    for (int i = 0; i < config->max_total; i++) {
        a->gfd[i] = -1;
        a->free_slots[i] = config->max_total - 1 - i; /* slot 0 on top */
        msr_list_init(&a->conns[i].unauth);
    }
    a->nfree = config->max_total;
    int port = 0;
    st = listen_on(config->address, &a->lfd, &port);
    if (st != MSR_OK)
        goto err_free;
    st = MSR_ERR_SYSTEM;
    a->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    a->epfd = epoll_create1(EPOLL_CLOEXEC);
    a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (a->wake_fd < 0 || a->epfd < 0 || a->spare_fd < 0) {
        MSR_ERROR("%s: cannot set up the listener: %s", a->log_name, strerror(errno));
        goto err_fds;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_LISTEN};
    struct epoll_event wev = {.events = EPOLLIN, .data.u64 = EV_WAKE};
    if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, a->lfd, &ev) != 0 ||
        epoll_ctl(a->epfd, EPOLL_CTL_ADD, a->wake_fd, &wev) != 0)
        goto err_fds;
    a->creds = grpc_insecure_server_credentials_create();
    if (pthread_create(&a->thread, NULL, accept_thread, a) != 0)
        goto err_creds;
    *port_p = port;
    *acceptor_p = a;
    return MSR_OK;

err_creds:
    grpc_server_credentials_release(a->creds);
err_fds:
    if (a->spare_fd >= 0)
        close(a->spare_fd);
    if (a->epfd >= 0)
        close(a->epfd);
    if (a->wake_fd >= 0)
        close(a->wake_fd);
    close(a->lfd);
err_free:
    pthread_mutex_destroy(&a->lock);
    msr_free(a->gfd);
    msr_free(a->conns);
    msr_free(a->free_slots);
    msr_free(a);
    return st;
}

void msr_rpc_acceptor_stop(msr_rpc_acceptor_t *a)
{
    if (a->lfd < 0)
        return;
    uint64_t one = 1;
    if (write(a->wake_fd, &one, sizeof one) != (ssize_t)sizeof one)
        MSR_DEBUG("%s: cannot wake the listener: %s", a->log_name, strerror(errno));
    pthread_join(a->thread, NULL);
    close(a->lfd);
    a->lfd = -1;
}

void msr_rpc_acceptor_destroy(msr_rpc_acceptor_t *a)
{
    if (a == NULL)
        return;
    msr_rpc_acceptor_stop(a);
    for (int i = 0; i < a->cfg.max_total; i++)
        if (a->gfd[i] >= 0)
            close(a->conns[i].dfd);
    grpc_server_credentials_release(a->creds);
    close(a->spare_fd);
    close(a->epfd);
    close(a->wake_fd);
    pthread_mutex_destroy(&a->lock);
    msr_map_cleanup(&a->unauth_hosts, NULL);
    msr_free(a->gfd);
    msr_free(a->conns);
    msr_free(a->free_slots);
    msr_free(a->slot_by_fd);
    msr_free(a);
}
