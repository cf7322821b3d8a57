// c10d::ProcessGroup over a libmsrun host communicator: torch's collectives
// mapped onto msr_comm_* (one call each, plus the copies torch's tensor lists
// and non-contiguous tensors need), run in order on the group's thread.
#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "msrun_c10d.hpp"

namespace msrun_c10d
{

namespace
{

using c10d::OpType;

// The groups alive, for shutdownAll (at exit, before msr_finalize).
std::mutex g_groups_mutex;
std::vector<ProcessGroup *> g_groups;

msr_op_t opOf(const c10d::ReduceOp &op, const char *what)
{
    switch (op.op_) {
    case c10d::ReduceOp::SUM:
        return MSR_OP_SUM;
    case c10d::ReduceOp::AVG:
        return MSR_OP_AVG;
    case c10d::ReduceOp::PRODUCT:
        return MSR_OP_PROD;
    case c10d::ReduceOp::MIN:
        return MSR_OP_MIN;
    case c10d::ReduceOp::MAX:
        return MSR_OP_MAX;
    default:
        refuse(std::string(what) + ": reduce op " + std::to_string(int(op.op_)) +
               " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
    }
}

// Per-rank element counts of alltoall_base: split sizes in rows of dim 0,
// none given meaning equal splits.
std::vector<uint64_t> splitCounts(const at::Tensor &t, const std::vector<int64_t> &splits, int size,
                                  uint64_t per_element)
{
    int64_t rows = t.dim() > 0 ? t.size(0) : t.numel();
    uint64_t row = rows > 0 ? static_cast<uint64_t>(t.numel() / rows) * per_element : 0;
    std::vector<uint64_t> counts(size);
    if (splits.empty()) {
        if (rows % size != 0)
            refuse("alltoall_base: dim 0 (" + std::to_string(rows) + ") not divisible by " +
                   std::to_string(size) + " ranks");
        std::fill(counts.begin(), counts.end(), row * (rows / size));
        return counts;
    }
    if (splits.size() != static_cast<size_t>(size))
        refuse("alltoall_base: " + std::to_string(splits.size()) + " split sizes for " +
               std::to_string(size) + " ranks");
    int64_t sum = 0;
    for (int i = 0; i < size; i++) {
        if (splits[i] < 0)
            refuse("alltoall_base: a negative split size");
        sum += splits[i];
        counts[i] = row * static_cast<uint64_t>(splits[i]);
    }
    if (sum != rows)
        refuse("alltoall_base: split sizes add up to " + std::to_string(sum) + ", dim 0 is " +
               std::to_string(rows));
    return counts;
}

std::vector<uint64_t> displsOf(const std::vector<uint64_t> &counts)
{
    std::vector<uint64_t> d(counts.size());
    uint64_t at = 0;
    for (size_t i = 0; i < counts.size(); i++) {
        d[i] = at;
        at += counts[i];
    }
    return d;
}

} // namespace

// ---- Work ----

Work::Work(int rank, OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get())))
{
}

std::vector<at::Tensor> Work::result()
{
    return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture()
{
    return future_;
}

void Work::finishOk()
{
    finish();
    future_->markCompleted(c10::IValue(outputs_));
}

void Work::finishError(std::exception_ptr error)
{
    finish(error);
    future_->setError(error);
}

P2PWork::P2PWork(int rank, OpType type, msr_comm_req_t *req, at::Tensor user, at::Tensor buf,
                 int src)
    : c10d::Work(rank, type), req_(req), user_(std::move(user)), buf_(std::move(buf)), src_(src)
{
}

int P2PWork::sourceRank() const
{
    if (opType_ != OpType::RECV && opType_ != OpType::RECVANYSOURCE)
        return c10d::Work::sourceRank(); // raises: not a receive
    std::lock_guard<std::mutex> lock(mutex_);
    if (opType_ == OpType::RECVANYSOURCE && (!completed_ || exception_))
        throw std::runtime_error(completed_ ? "msrun recv: the receive from any source failed"
                                            : "msrun recv: the sender is known once the "
                                              "receive from any source finished (wait first)");
    return src_;
}

P2PWork::~P2PWork()
{
    if (req_)
        msr_comm_wait(req_);
}

void P2PWork::complete(msr_status_t st)
{
    req_ = nullptr;
    std::exception_ptr error;
    try {
        raiseIf(st, opType_ == OpType::SEND ? "send" : "recv");
        if (!buf_.is_same(user_))
            user_.copy_(buf_);
    } catch (...) {
        error = std::current_exception();
    }
    finish(error);
}

bool P2PWork::isCompleted()
{
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (completed_)
            return true;
    }
    msr_status_t st = msr_comm_test(&req_);
    if (st == MSR_IN_PROGRESS)
        return false;
    complete(st);
    return true;
}

// With a timeout: libmsrun's wait has the deadline set at the post, so this
// polls msr_comm_test (which drives the progress), yielding at first and
// then sleeping up to 1 ms between tries, until done or the timeout.
bool P2PWork::wait(std::chrono::milliseconds timeout)
{
    using clock = std::chrono::steady_clock;
    if (timeout == kNoTimeout) {
        bool done;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            done = completed_;
        }
        if (!done)
            complete(msr_comm_wait(req_));
        return c10d::Work::wait(timeout);
    }
    const clock::time_point deadline = clock::now() + timeout;
    std::chrono::microseconds nap(10);
    for (int tries = 0; !isCompleted(); tries++) {
        if (clock::now() >= deadline)
            throw std::runtime_error(std::string("msrun ") +
                                     (opType_ == OpType::SEND ? "send" : "recv") +
                                     ": wait timed out after " + std::to_string(timeout.count()) +
                                     " ms (the operation is still in flight)");
        if (tries < 100) {
            std::this_thread::yield();
        } else {
            std::this_thread::sleep_for(nap);
            nap = std::min(nap * 2, std::chrono::microseconds(1000));
        }
    }
    return c10d::Work::wait(timeout);
}

std::vector<at::Tensor> P2PWork::result()
{
    return {user_};
}

// ---- the group ----

ProcessGroup::ProcessGroup(msr_comm_t *comm, int64_t timeout_ms)
    : c10d::ProcessGroup(msr_comm_rank(comm), msr_comm_size(comm)), comm_(comm)
{
    msr_comm_set_timeout(comm_, timeout_ms);
    init();
    worker_ = std::thread(&ProcessGroup::runLoop, this);
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    g_groups.push_back(this);
}

ProcessGroup::~ProcessGroup()
{
    {
        std::lock_guard<std::mutex> lock(g_groups_mutex);
        g_groups.erase(std::remove(g_groups.begin(), g_groups.end(), this), g_groups.end());
    }
    shutdown();
}

c10::intrusive_ptr<ProcessGroup> ProcessGroup::world(msr_ctx_t *ctx, int64_t timeout_ms)
{
    if (!ctx)
        refuse("no context (msrun.init() first)");
    msr_comm_t *comm = nullptr;
    raiseIf(msr_comm_world(ctx, &comm), "comm_world");
    return c10::make_intrusive<ProcessGroup>(comm, timeout_ms);
}

void ProcessGroup::shutdown()
{
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_)
            return;
        stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id())
        worker_.join();
    else if (worker_.joinable())
        worker_.detach();
    msr_comm_destroy(comm_);
    comm_ = nullptr;
}

void shutdownAll()
{
    std::vector<ProcessGroup *> groups;
    {
        std::lock_guard<std::mutex> lock(g_groups_mutex);
        groups = g_groups;
    }
    for (ProcessGroup *g : groups)
        g->shutdown();
    stopAllWatches();
}

void ProcessGroup::runLoop()
{
    for (;;) {
        std::pair<c10::intrusive_ptr<Work>, Job> item;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
            if (queue_.empty())
                return; /* stopped, and everything queued is done */
            item = std::move(queue_.front());
            queue_.pop_front();
        }
        try {
            item.second(comm_);
            item.first->finishOk();
        } catch (...) {
            item.first->finishError(std::current_exception());
        }
    }
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::enqueue(OpType type, std::vector<at::Tensor> outputs,
                                                     Job job)
{
    auto work = c10::make_intrusive<Work>(rank_, type, std::move(outputs));
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_)
            throw std::runtime_error("msrun backend: the process group was shut down");
        queue_.emplace_back(work, std::move(job));
    }
    cv_.notify_one();
    return work;
}

msr_comm_t *ProcessGroup::liveComm(const char *what)
{
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_ || !comm_)
        throw std::runtime_error(std::string("msrun backend: ") + what +
                                 ": the process group was shut down");
    return comm_;
}

c10::intrusive_ptr<ProcessGroup> ProcessGroup::split(int color, int key, int64_t timeout_ms)
{
    auto out = std::make_shared<msr_comm_t *>(nullptr);
    auto work = enqueue(OpType::UNKNOWN, {}, [out, color, key](msr_comm_t *c) {
        raiseIf(msr_comm_split(c, color, key, out.get()), "split");
    });
    work->wait();
    if (!*out)
        return c10::intrusive_ptr<ProcessGroup>();
    return c10::make_intrusive<ProcessGroup>(*out, timeout_ms);
}

// ---- collectives ----

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce(std::vector<at::Tensor> &tensors,
                                                       const c10d::AllreduceOptions &opts)
{
    const at::Tensor &t = single(tensors, "allreduce");
    msr_op_t op = opOf(opts.reduceOp, "allreduce");
    Buf b = bufOf(t, true, "allreduce");
    return enqueue(OpType::ALLREDUCE, {t}, [b, op](msr_comm_t *c) {
        raiseIf(msr_comm_allreduce(c, MSR_IN_PLACE, b.data(), b.count, b.dtype, op), "allreduce");
        b.copyBack();
    });
}

// Every tensor in one allreduce of their concatenation.
c10::intrusive_ptr<c10d::Work>
ProcessGroup::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                  const c10d::AllreduceCoalescedOptions &opts)
{
    if (tensors.empty())
        refuse("allreduce_coalesced: no tensors");
    msr_op_t op = opOf(opts.reduceOp, "allreduce_coalesced");
    std::vector<at::Tensor> flat;
    for (const at::Tensor &t : tensors) {
        checkCpu(t, "allreduce_coalesced");
        checkSame(tensors[0], t, "allreduce_coalesced");
        flat.push_back(t.reshape(-1));
    }
    Buf b = bufOf(at::cat(flat), true, "allreduce_coalesced");
    std::vector<at::Tensor> outs = tensors;
    return enqueue(OpType::ALLREDUCE_COALESCED, outs, [b, op, outs](msr_comm_t *c) {
        raiseIf(msr_comm_allreduce(c, MSR_IN_PLACE, b.data(), b.count, b.dtype, op),
                "allreduce_coalesced");
        int64_t at = 0;
        for (const at::Tensor &o : outs) {
            o.copy_(b.buf.narrow(0, at, o.numel()).view(o.sizes()));
            at += o.numel();
        }
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::broadcast(std::vector<at::Tensor> &tensors,
                                                       const c10d::BroadcastOptions &opts)
{
    const at::Tensor &t = single(tensors, "broadcast");
    checkRoot(opts.rootRank, size_, "broadcast");
    int root = static_cast<int>(opts.rootRank);
    Buf b = bufOf(t, false, "broadcast");
    return enqueue(OpType::BROADCAST, {t}, [b, root](msr_comm_t *c) {
        raiseIf(msr_comm_broadcast(c, b.data(), b.count, b.dtype, root), "broadcast");
        b.copyBack();
    });
}

// The result at the root, in place; the other ranks' tensors are left as
// they were.
c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce(std::vector<at::Tensor> &tensors,
                                                    const c10d::ReduceOptions &opts)
{
    const at::Tensor &t = single(tensors, "reduce");
    checkRoot(opts.rootRank, size_, "reduce");
    int root = static_cast<int>(opts.rootRank);
    msr_op_t op = opOf(opts.reduceOp, "reduce");
    Buf b = bufOf(t, true, "reduce");
    bool at_root = root == rank_;
    return enqueue(OpType::REDUCE, {t}, [b, op, root, at_root](msr_comm_t *c) {
        if (at_root) {
            raiseIf(msr_comm_reduce(c, MSR_IN_PLACE, b.data(), b.count, b.dtype, op, root),
                    "reduce");
            b.copyBack();
        } else {
            raiseIf(msr_comm_reduce(c, b.data(), nullptr, b.count, b.dtype, op, root), "reduce");
        }
    });
}

// Outputs that are the consecutive blocks of one buffer (a tensor's chunks)
// receive in place; other lists through the group's scratch buffer.
c10::intrusive_ptr<c10d::Work>
ProcessGroup::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &)
{
    const at::Tensor &t = single(inputs, "allgather");
    if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_))
        refuse("allgather: one list of " + std::to_string(size_) + " output tensors");
    bool adjacent = true;
    const int64_t nbytes = t.numel() * t.element_size();
    for (size_t i = 0; i < outputs[0].size(); i++) {
        const at::Tensor &o = outputs[0][i];
        checkCpu(o, "allgather");
        checkSame(t, o, "allgather");
        if (o.numel() != t.numel())
            refuse("allgather: output tensors must have the input's number of elements");
        adjacent = adjacent && o.is_contiguous() &&
                   static_cast<char *>(o.data_ptr()) ==
                       static_cast<char *>(outputs[0][0].data_ptr()) + i * nbytes;
    }
    Buf in = bufOf(t, false, "allgather");
    std::vector<at::Tensor> outs = outputs[0];
    return enqueue(OpType::ALLGATHER, outs, [this, in, outs, adjacent, nbytes](msr_comm_t *c) {
        if (adjacent) {
            raiseIf(msr_comm_allgather(c, in.data(), outs[0].data_ptr(), in.count, in.dtype),
                    "allgather");
            return;
        }
        at::Tensor &all = scratch(nbytes * size_);
        raiseIf(msr_comm_allgather(c, in.data(), all.data_ptr(), in.count, in.dtype), "allgather");
        for (size_t i = 0; i < outs.size(); i++)
            outs[i].copy_(all.narrow(0, nbytes * i, nbytes)
                              .view(outs[i].scalar_type())
                              .view(outs[i].sizes()));
    });
}

// Worker thread only: at least bytes of scratch memory, kept between calls.
at::Tensor &ProcessGroup::scratch(int64_t bytes)
{
    if (!scratch_.defined() || scratch_.numel() < bytes)
        scratch_ = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
    return scratch_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::_allgather_base(at::Tensor &output, at::Tensor &input,
                                                             const c10d::AllgatherOptions &)
{
    checkCpu(output, "_allgather_base");
    checkSame(input, output, "_allgather_base");
    if (output.numel() != input.numel() * size_)
        refuse("_allgather_base: the output must hold " + std::to_string(size_) +
               " times the input's elements");
    Buf in = bufOf(input, false, "_allgather_base");
    Buf out = bufOf(output, false, "_allgather_base");
    return enqueue(OpType::_ALLGATHER_BASE, {output}, [in, out](msr_comm_t *c) {
        raiseIf(msr_comm_allgather(c, in.data(), out.data(), in.count, in.dtype),
                "_allgather_base");
        out.copyBack();
    });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroup::reduce_scatter(std::vector<at::Tensor> &outputs,
                             std::vector<std::vector<at::Tensor>> &inputs,
                             const c10d::ReduceScatterOptions &opts)
{
    const at::Tensor &t = single(outputs, "reduce_scatter");
    msr_op_t op = opOf(opts.reduceOp, "reduce_scatter");
    if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_))
        refuse("reduce_scatter: one list of " + std::to_string(size_) + " input tensors");
    std::vector<at::Tensor> flat;
    for (const at::Tensor &i : inputs[0]) {
        checkCpu(i, "reduce_scatter");
        checkSame(t, i, "reduce_scatter");
        if (i.numel() != t.numel())
            refuse("reduce_scatter: input tensors must have the output's number of elements");
        flat.push_back(i.reshape(-1));
    }
    Buf in = bufOf(at::cat(flat), true, "reduce_scatter");
    Buf out = bufOf(t, true, "reduce_scatter");
    return enqueue(OpType::REDUCE_SCATTER, {t}, [in, out, op](msr_comm_t *c) {
        raiseIf(msr_comm_reduce_scatter(c, in.data(), out.data(), out.count, out.dtype, op),
                "reduce_scatter");
        out.copyBack();
    });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroup::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                   const c10d::ReduceScatterOptions &opts)
{
    msr_op_t op = opOf(opts.reduceOp, "_reduce_scatter_base");
    checkCpu(input, "_reduce_scatter_base");
    checkSame(input, output, "_reduce_scatter_base");
    if (input.numel() != output.numel() * size_)
        refuse("_reduce_scatter_base: the input must hold " + std::to_string(size_) +
               " times the output's elements");
    Buf in = bufOf(input, true, "_reduce_scatter_base");
    Buf out = bufOf(output, true, "_reduce_scatter_base");
    return enqueue(OpType::_REDUCE_SCATTER_BASE, {output}, [in, out, op](msr_comm_t *c) {
        raiseIf(msr_comm_reduce_scatter(c, in.data(), out.data(), out.count, out.dtype, op),
                "_reduce_scatter_base");
        out.copyBack();
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::alltoall_base(at::Tensor &output, at::Tensor &input,
                                                           std::vector<int64_t> &outputSplits,
                                                           std::vector<int64_t> &inputSplits,
                                                           const c10d::AllToAllOptions &)
{
    checkCpu(input, "alltoall_base");
    checkSame(input, output, "alltoall_base");
    Buf in = bufOf(input, false, "alltoall_base");
    Buf out = bufOf(output, false, "alltoall_base");
    if (in.data() == out.data())
        refuse("alltoall_base: the output and input must not share memory");
    msr_dtype_t known;
    uint64_t per = dtypeOf(input.scalar_type(), &known) ? 1 : input.element_size();
    std::vector<uint64_t> sc = splitCounts(input, inputSplits, size_, per);
    std::vector<uint64_t> rc = splitCounts(output, outputSplits, size_, per);
    std::vector<uint64_t> sd = displsOf(sc), rd = displsOf(rc);
    return enqueue(OpType::ALLTOALL_BASE, {output}, [in, out, sc, rc, sd, rd](msr_comm_t *c) {
        raiseIf(msr_comm_alltoallv(c, in.data(), sc.data(), sd.data(), out.data(), rc.data(),
                                   rd.data(), in.dtype),
                "alltoall_base");
        out.copyBack();
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::alltoall(std::vector<at::Tensor> &outputs,
                                                      std::vector<at::Tensor> &inputs,
                                                      const c10d::AllToAllOptions &)
{
    if (outputs.size() != static_cast<size_t>(size_) || inputs.size() != outputs.size())
        refuse("alltoall: " + std::to_string(size_) + " input and output tensors");
    std::vector<at::Tensor> flat_in, flat_out;
    for (int i = 0; i < size_; i++) {
        checkCpu(inputs[i], "alltoall");
        checkCpu(outputs[i], "alltoall");
        checkSame(inputs[0], inputs[i], "alltoall");
        checkSame(inputs[0], outputs[i], "alltoall");
        flat_in.push_back(inputs[i].reshape(-1));
        flat_out.push_back(outputs[i].reshape(-1));
    }
    Buf in = bufOf(at::cat(flat_in), false, "alltoall");
    Buf out = bufOf(at::cat(flat_out), false, "alltoall");
    msr_dtype_t known;
    uint64_t per = dtypeOf(inputs[0].scalar_type(), &known) ? 1 : inputs[0].element_size();
    std::vector<uint64_t> sc(size_), rc(size_);
    for (int i = 0; i < size_; i++) {
        sc[i] = inputs[i].numel() * per;
        rc[i] = outputs[i].numel() * per;
    }
    std::vector<uint64_t> sd = displsOf(sc), rd = displsOf(rc);
    std::vector<at::Tensor> outs = outputs;
    return enqueue(OpType::ALLTOALL, outs, [in, out, sc, rc, sd, rd, outs](msr_comm_t *c) {
        raiseIf(msr_comm_alltoallv(c, in.data(), sc.data(), sd.data(), out.data(), rc.data(),
                                   rd.data(), in.dtype),
                "alltoall");
        int64_t at = 0;
        for (const at::Tensor &o : outs) {
            o.copy_(out.buf.narrow(0, at, o.numel()).view(o.sizes()));
            at += o.numel();
        }
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::barrier(const c10d::BarrierOptions &)
{
    return enqueue(OpType::BARRIER, {},
                   [](msr_comm_t *c) { raiseIf(msr_comm_barrier(c), "barrier"); });
}

// ---- point to point ----

c10::intrusive_ptr<c10d::Work> ProcessGroup::send(std::vector<at::Tensor> &tensors, int dst,
                                                  int tag)
{
    const at::Tensor &t = single(tensors, "send");
    checkRoot(dst, size_, "send");
    if (tag < 0 || tag > MSR_COMM_TAG_MAX)
        refuse("send: tag " + std::to_string(tag) + " outside 0.." +
               std::to_string(MSR_COMM_TAG_MAX));
    Buf b = bufOf(t, false, "send");
    msr_comm_req_t *req = nullptr;
    raiseIf(msr_comm_isend(liveComm("send"), b.data(), b.count, b.dtype, dst, tag, &req), "send");
    return c10::make_intrusive<P2PWork>(rank_, OpType::SEND, req, b.buf, b.buf);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::recv(std::vector<at::Tensor> &tensors, int src,
                                                  int tag)
{
    const at::Tensor &t = single(tensors, "recv");
    checkRoot(src, size_, "recv");
    if (tag < 0 || tag > MSR_COMM_TAG_MAX)
        refuse("recv: tag " + std::to_string(tag) + " outside 0.." +
               std::to_string(MSR_COMM_TAG_MAX));
    Buf b = bufOf(t, false, "recv");
    msr_comm_req_t *req = nullptr;
    raiseIf(msr_comm_irecv(liveComm("recv"), b.data(), b.count, b.dtype, src, tag, &req), "recv");
    return c10::make_intrusive<P2PWork>(rank_, OpType::RECV, req, t, b.buf, src);
}

// dist.recv without src: the Work's sourceRank() is the sender's rank in
// this group, once it finished.
c10::intrusive_ptr<c10d::Work> ProcessGroup::recvAnysource(std::vector<at::Tensor> &tensors,
                                                           int tag)
{
    const at::Tensor &t = single(tensors, "recv");
    if (tag < 0 || tag > MSR_COMM_TAG_MAX)
        refuse("recv: tag " + std::to_string(tag) + " outside 0.." +
               std::to_string(MSR_COMM_TAG_MAX));
    Buf b = bufOf(t, false, "recv");
    auto work = c10::make_intrusive<P2PWork>(rank_, OpType::RECVANYSOURCE, nullptr, t, b.buf);
    msr_comm_req_t *req = nullptr;
    raiseIf(msr_comm_irecv_any(liveComm("recv"), b.data(), b.count, b.dtype, tag, work->srcSlot(),
                               &req),
            "recv");
    work->setRequest(req);
    return work;
}

} // namespace msrun_c10d
