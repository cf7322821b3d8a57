// c10d::Store over libmsrun's store (msr_store_*): torch's keys and values
// kept by the job's coordinator, reached through the node's msrun with the
// job's token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "msrun_c10d.hpp"

namespace msrun_c10d
{

void raiseIf(msr_status_t st, const char *what)
{
    if (st == MSR_OK)
        return;
    throw std::runtime_error(std::string("msrun ") + what + ": " + msr_status_name(st) + ": " +
                             msr_last_error());
}

// torch's keys are any bytes, msrun's 1 to MSR_KEY_MAX bytes without
// control characters (and NUL-terminated): control bytes, DEL and '%' are
// written as %XX, and the empty key as "%" alone, so every torch key has
// its own msrun key. A key too long once escaped is refused by the store.
std::string Store::keyOf(const std::string &key)
{
    if (key.empty())
        return "%";
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : key) {
        if (c < 0x20 || c == 0x7f || c == '%') {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

namespace
{

// The stores alive, for stopAllWatches (at exit, before msr_finalize).
std::mutex g_stores_mutex;
std::vector<Store *> g_stores;

} // namespace

Store::Store(msr_ctx_t *ctx) : ctx_(ctx)
{
    if (!ctx)
        throw std::invalid_argument("msrun store: no context (msrun.init() first)");
    std::lock_guard<std::mutex> lock(g_stores_mutex);
    g_stores.push_back(this);
}

Store::~Store()
{
    {
        std::lock_guard<std::mutex> lock(g_stores_mutex);
        g_stores.erase(std::remove(g_stores.begin(), g_stores.end(), this), g_stores.end());
    }
    stopWatches();
}

void stopAllWatches()
{
    std::lock_guard<std::mutex> lock(g_stores_mutex);
    for (Store *s : g_stores)
        s->stopWatches();
}

void Store::stopWatches()
{
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lock(watchMutex_);
        stopping_ = true;
        threads.swap(watchers_);
    }
    for (std::thread &t : threads)
        t.join();
}

void Store::watchKey(const std::string &key, c10d::WatchKeyCallback callback)
{
    if (!callback)
        throw std::invalid_argument("msrun store watchKey: no callback");
    // what the key holds now: the watch reports changes from it
    void *v = nullptr;
    size_t len = 0;
    c10::optional<std::string> seen;
    msr_status_t st = msr_store_get(ctx_, keyOf(key).c_str(), 0, &v, &len);
    if (st != MSR_ERR_NOT_FOUND) {
        raiseIf(st, "store watchKey");
        seen = std::string(static_cast<char *>(v), len);
        free(v);
    }
    std::lock_guard<std::mutex> lock(watchMutex_);
    if (stopping_)
        throw std::runtime_error("msrun store watchKey: the store's watches were stopped");
    watchers_.emplace_back(&Store::watchLoop, this, key, std::move(callback), std::move(seen));
}

void Store::watchLoop(const std::string &key, c10d::WatchKeyCallback callback,
                      c10::optional<std::string> seen)
{
    const std::string k = keyOf(key);
    while (!stopping_) {
        void *v = nullptr;
        size_t len = 0;
        msr_status_t st = msr_store_wait_change(ctx_, k.c_str(), seen ? seen->data() : nullptr,
                                                seen ? seen->size() : 0, kWatchSliceMs, &v, &len);
        if (st == MSR_ERR_TIMEOUT)
            continue;
        c10::optional<std::string> now;
        if (st == MSR_OK) {
            now = std::string(static_cast<char *>(v), len);
            free(v);
        } else if (st != MSR_ERR_NOT_FOUND || !seen) {
            std::fprintf(stderr, "msrun store watchKey('%s') ended: %s: %s\n", k.c_str(),
                         msr_status_name(st), msr_last_error());
            return;
        }
        try {
            callback(seen, now);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "msrun store watchKey('%s'): the callback raised: %s\n", k.c_str(),
                         e.what());
        }
        seen = std::move(now);
    }
}

// torch's timeouts: > 0 a deadline; 0 (kNoTimeout) or unset: the context's.
int64_t Store::waitMs(std::chrono::milliseconds timeout) const
{
    return timeout.count() > 0 ? timeout.count() : -1;
}

void Store::set(const std::string &key, const std::vector<uint8_t> &value)
{
    raiseIf(msr_store_set(ctx_, keyOf(key).c_str(), value.data(), value.size()), "store set");
}

// TCPStore's rule: returns the value now under key: desired when it was
// swapped in, else the current value (expected when key is absent and
// expected was not empty).
std::vector<uint8_t> Store::compareSet(const std::string &key, const std::vector<uint8_t> &expected,
                                       const std::vector<uint8_t> &desired)
{
    const std::string k = keyOf(key);
    int swapped = 0;
    const uint8_t empty = 0;
    const void *exp = expected.empty() ? nullptr : expected.data();
    raiseIf(msr_store_compare_set(ctx_, k.c_str(), exp, expected.size(), desired.data(),
                                  desired.size(), &swapped),
            "store compare_set");
    // an empty expected value also matches an empty value stored
    if (!swapped && expected.empty())
        raiseIf(msr_store_compare_set(ctx_, k.c_str(), &empty, 0, desired.data(), desired.size(),
                                      &swapped),
                "store compare_set");
    if (swapped)
        return desired;
    void *v = nullptr;
    size_t len = 0;
    msr_status_t st = msr_store_get(ctx_, k.c_str(), 0, &v, &len);
    if (st == MSR_ERR_NOT_FOUND)
        return expected;
    raiseIf(st, "store compare_set (reading the current value)");
    std::vector<uint8_t> out(static_cast<uint8_t *>(v), static_cast<uint8_t *>(v) + len);
    free(v);
    return out;
}

std::vector<uint8_t> Store::get(const std::string &key)
{
    void *v = nullptr;
    size_t len = 0;
    raiseIf(msr_store_get(ctx_, keyOf(key).c_str(), waitMs(timeout_), &v, &len), "store get");
    std::vector<uint8_t> out(static_cast<uint8_t *>(v), static_cast<uint8_t *>(v) + len);
    free(v);
    return out;
}

int64_t Store::add(const std::string &key, int64_t value)
{
    int64_t now = 0;
    raiseIf(msr_store_add(ctx_, keyOf(key).c_str(), value, &now), "store add");
    return now;
}

bool Store::deleteKey(const std::string &key)
{
    int existed = 0;
    raiseIf(msr_store_delete(ctx_, keyOf(key).c_str(), &existed), "store delete");
    return existed != 0;
}

bool Store::check(const std::vector<std::string> &keys)
{
    for (const std::string &key : keys) {
        void *v = nullptr;
        size_t len = 0;
        msr_status_t st = msr_store_get(ctx_, keyOf(key).c_str(), 0, &v, &len);
        if (st == MSR_ERR_NOT_FOUND)
            return false;
        msrun_c10d::raiseIf(st, "store check");
        free(v);
    }
    return true;
}

// Every key of the job's store: torch's keys are stored as they are
// (escaped, not prefixed), so a fresh job's store holds only them, and
// TCPStore too counts every key its server holds.
int64_t Store::getNumKeys()
{
    uint64_t n = 0;
    raiseIf(msr_store_num_keys(ctx_, &n), "store num_keys");
    return static_cast<int64_t>(n);
}

void Store::wait(const std::vector<std::string> &keys)
{
    wait(keys, timeout_);
}

// Every key within one deadline for them all.
void Store::wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout)
{
    using clock = std::chrono::steady_clock;
    const int64_t total = waitMs(timeout);
    const clock::time_point start = clock::now();
    for (const std::string &key : keys) {
        int64_t left = -1;
        if (total > 0) {
            auto spent =
                std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
            left = std::max<int64_t>(1, total - spent.count());
        }
        void *v = nullptr;
        size_t len = 0;
        raiseIf(msr_store_get(ctx_, keyOf(key).c_str(), left, &v, &len), "store wait");
        free(v);
    }
}

} // namespace msrun_c10d
