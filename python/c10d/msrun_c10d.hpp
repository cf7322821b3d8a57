// torch.distributed over libmsrun: a c10d::ProcessGroup whose collectives
// are libmsrun's host communicators, and a c10d::Store over the job's
// authenticated store. A thin layer: every call is one or two libmsrun calls
// plus the copies torch's tensor conventions need; libmsrun's rules (order,
// deadlines, a broken communicator) hold unchanged (docs/comm.md,
// docs/python.md "PyTorch").
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "msrun/comm.h"
#include "msrun/store.h"

namespace msrun_c10d
{

// Throws std::runtime_error "msrun <what>: <STATUS_NAME>: <msr_last_error>"
// when st is not MSR_OK. Called right after the libmsrun call, in the thread
// that made it (msr_last_error is per thread).
void raiseIf(msr_status_t st, const char *what);

// A tensor as libmsrun sees it: contiguous memory (the tensor itself or a
// copy made at the call), its dtype and element count. Types libmsrun cannot
// reduce move as bytes where nothing is reduced.
struct Buf {
    at::Tensor user, buf;
    msr_dtype_t dtype = MSR_DTYPE_U8;
    uint64_t count = 0;

    void *data() const
    {
        return buf.data_ptr();
    }
    // The result back into the caller's tensor when a copy was used.
    void copyBack() const
    {
        if (!buf.is_same(user))
            user.copy_(buf);
    }
};

// Throws std::invalid_argument "msrun backend: <what>" (a ValueError).
[[noreturn]] void refuse(const std::string &what);
// The libmsrun dtype of a torch dtype; false when libmsrun has none.
bool dtypeOf(at::ScalarType type, msr_dtype_t *dtype_p);
// Refuses an undefined, sparse or non-CPU tensor.
void checkCpu(const at::Tensor &t, const char *what);
// t as a Buf; reducing: the dtype must be one libmsrun reduces.
Buf bufOf(const at::Tensor &t, bool reducing, const char *what);
// The one tensor of a list that must hold exactly one.
const at::Tensor &single(const std::vector<at::Tensor> &tensors, const char *what);
// Refuses a root (or peer) outside 0..size-1.
void checkRoot(int64_t root, int size, const char *what);
// Refuses tensors of different dtypes.
void checkSame(const at::Tensor &a, const at::Tensor &b, const char *what);

// c10d::Store over msr_store_*: the values torch keeps (its barrier's
// counters as decimal text, as TCPStore's) in msrun's store, so a job opens
// no store of its own. getNumKeys counts every key of the job's store in
// its generation (msr_store_num_keys), msrun's own too, as TCPStore
// counts its own. watchKey runs its callback from a thread of the store's
// (msr_store_wait_change) until stopWatches, which the destructor and
// shutdownAll call. The context stays the caller's and must outlive the
// store (or its watches: shutdownAll stops them before msr_finalize). Any
// thread.
class Store : public c10d::Store
{
  public:
    explicit Store(msr_ctx_t *ctx);
    ~Store() override;
    void set(const std::string &key, const std::vector<uint8_t> &value) override;
    std::vector<uint8_t> compareSet(const std::string &key, const std::vector<uint8_t> &expected,
                                    const std::vector<uint8_t> &desired) override;
    std::vector<uint8_t> get(const std::string &key) override;
    int64_t add(const std::string &key, int64_t value) override;
    bool deleteKey(const std::string &key) override;
    bool check(const std::vector<std::string> &keys) override;
    int64_t getNumKeys() override;
    void wait(const std::vector<std::string> &keys) override;
    void wait(const std::vector<std::string> &keys,
              const std::chrono::milliseconds &timeout) override;

    // TCPStore's rule: callback(old, new) on every change of key seen
    // after this returns: create (old nullopt), update, delete (new
    // nullopt). A write of the same value is no change, and changes
    // quicker than a callback may be seen as one. An exception from the
    // callback is printed and the watch goes on; a store error (a new
    // generation, say) is printed and ends the watch.
    void watchKey(const std::string &key, c10d::WatchKeyCallback callback) override;
    // Ends every watch and waits for its thread (for at most
    // kWatchSliceMs). Idempotent; not from a callback.
    void stopWatches();

    // The msrun key of a torch key (torch allows any bytes, msrun no
    // control characters); injective.
    static std::string keyOf(const std::string &key);

    // How long a watch waits in one store call before it looks whether
    // it was stopped.
    static constexpr int64_t kWatchSliceMs = 500;

  private:
    int64_t waitMs(std::chrono::milliseconds timeout) const;
    void watchLoop(const std::string &key, c10d::WatchKeyCallback callback,
                   c10::optional<std::string> seen);
    msr_ctx_t *ctx_;
    std::mutex watchMutex_;
    std::atomic<bool> stopping_{false};
    std::vector<std::thread> watchers_;
};

// The Work of a collective: finished by the group's worker thread, with a
// future holding its output tensors (DDP's comm hooks chain on it).
class Work : public c10d::Work
{
  public:
    Work(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);
    std::vector<at::Tensor> result() override;
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
    void finishOk();
    void finishError(std::exception_ptr error);

  private:
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work of a send or recv: posted at once (msr_comm_isend/irecv) and
// finished by the thread that waits; a recv into a non-contiguous tensor is
// copied back then. wait() is bounded by the group's deadline (which breaks
// the group when it passes); wait(timeout) also by its own timeout, which
// raises and leaves the operation in flight, to be waited for again. Dropped
// unfinished, it is waited for. A recv's sourceRank() is its peer's rank in
// the group: the one named, or (recvAnysource) the sender's once finished.
class P2PWork : public c10d::Work
{
  public:
    // src: a recv's peer (-1 for recvAnysource, which posts into srcSlot()
    // and then hands over its request with setRequest).
    P2PWork(int rank, c10d::OpType type, msr_comm_req_t *req, at::Tensor user, at::Tensor buf,
            int src = -1);
    ~P2PWork() override;
    bool isCompleted() override;
    bool wait(std::chrono::milliseconds timeout) override;
    std::vector<at::Tensor> result() override;
    int sourceRank() const override;
    int *srcSlot()
    {
        return &src_;
    }
    void setRequest(msr_comm_req_t *req)
    {
        req_ = req;
    }

  private:
    void complete(msr_status_t st);
    msr_comm_req_t *req_;
    at::Tensor user_, buf_;
    int src_; // written by libmsrun when a receive from any source ends
};

// A process group over one msrun communicator (owned). Collectives run in
// call order on one worker thread of the group (each rank's order is its
// callers' order, as libmsrun needs), each a blocking libmsrun call bounded
// by the group's timeout; the Work returned is finished by that thread.
// send/recv are posted at once and finished by whoever waits on them.
class ProcessGroup : public c10d::ProcessGroup
{
  public:
    // Takes comm (its rank and size are the group's); timeout_ms < 0: none.
    ProcessGroup(msr_comm_t *comm, int64_t timeout_ms);
    ~ProcessGroup() override;
    // msr_comm_world over ctx: collective over the whole job.
    static c10::intrusive_ptr<ProcessGroup> world(msr_ctx_t *ctx, int64_t timeout_ms);
    // msr_comm_split, run in order with this group's collectives; null for
    // color MSR_COMM_NO_COLOR. Blocks until done.
    c10::intrusive_ptr<ProcessGroup> split(int color, int key, int64_t timeout_ms);
    // Finishes the queued work, stops the thread and destroys the
    // communicator; later calls raise. Twice does nothing.
    void shutdown();

    const std::string getBackendName() const override
    {
        return "msrun";
    }
    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allreduce_coalesced(std::vector<at::Tensor> &tensors,
                        const c10d::AllreduceCoalescedOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs,
                        const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                         const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &outputSplits,
                                                 std::vector<int64_t> &inputSplits,
                                                 const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src,
                                        int tag) override;
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                                 int tag) override;

  private:
    using Job = std::function<void(msr_comm_t *)>;
    c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                           Job job);
    void runLoop();
    msr_comm_t *liveComm(const char *what);
    at::Tensor &scratch(int64_t bytes);

    msr_comm_t *comm_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::pair<c10::intrusive_ptr<Work>, Job>> queue_;
    bool stop_ = false;
    std::thread worker_;
    at::Tensor scratch_; // the worker thread's, for lists gathered through it
};

// Destroys the communicator of every live group (before msr_finalize, at
// exit): their later calls raise.
void shutdownAll();
// Every live store's stopWatches (shutdownAll calls it).
void stopAllWatches();

} // namespace msrun_c10d
