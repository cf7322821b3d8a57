// The process group's rooted and list collectives that libmsrun has no call
// of their own for: gather and scatter as one alltoallv whose only non-zero
// blocks go to or come from the root, allgather_coalesced as one allgather
// of every input's bytes. Each still one libmsrun collective, run in order
// on the group's thread, so they order with the other collectives as they
// must.
#include <stdexcept>

#include "msrun_c10d.hpp"

namespace msrun_c10d
{

namespace
{

using c10d::OpType;

// The list of size tensors like t that a rooted call takes at its root;
// none elsewhere (torch passes an empty list there).
std::vector<at::Tensor> rootList(const std::vector<std::vector<at::Tensor>> &lists,
                                 const at::Tensor &t, bool at_root, int size, const char *what,
                                 const char *kind)
{
    if (!at_root) {
        if (!lists.empty() && !(lists.size() == 1 && lists[0].empty()))
            refuse(std::string(what) + ": " + kind +
                   " tensors given on a rank that is not the root");
        return {};
    }
    if (lists.size() != 1 || lists[0].size() != static_cast<size_t>(size))
        refuse(std::string(what) + ": the root takes one list of " + std::to_string(size) + " " +
               kind + " tensors (got " +
               (lists.size() == 1 ? std::to_string(lists[0].size()) + " tensors"
                                  : std::to_string(lists.size()) + " lists") +
               ")");
    for (const at::Tensor &o : lists[0]) {
        checkCpu(o, what);
        checkSame(t, o, what);
        if (o.numel() != t.numel())
            refuse(std::string(what) + ": an " + kind + " tensor of " + std::to_string(o.numel()) +
                   " elements where " + std::to_string(t.numel()) + " were expected");
    }
    return lists[0];
}

// What gather and scatter take before they queue, checked in this order:
// this rank's one tensor t (of mine), the root, the root's list of size
// tensors like t (of lists; none elsewhere) and t as a Buf.
struct Rooted {
    at::Tensor t;
    int root;
    std::vector<at::Tensor> list;
    Buf buf;
};

Rooted rooted(const std::vector<at::Tensor> &mine,
              const std::vector<std::vector<at::Tensor>> &lists, int64_t root, int rank, int size,
              const char *what, const char *kind)
{
    const at::Tensor &t = single(mine, what);
    checkRoot(root, size, what);
    Rooted r{t, static_cast<int>(root), {}, {}};
    r.list = rootList(lists, t, r.root == rank, size, what, kind);
    r.buf = bufOf(t, false, what);
    return r;
}

// dst's elements from the bytes of bytes (a uint8 tensor of dst's size in
// bytes, at any offset: viewing it as dst's dtype could be misaligned).
void copyBytes(const at::Tensor &dst, const at::Tensor &bytes)
{
    at::Tensor tmp = at::empty(dst.sizes(), dst.options());
    tmp.reshape(-1).view(at::kByte).copy_(bytes);
    dst.copy_(tmp);
}

// t's elements as a flat uint8 tensor (a copy where t is not contiguous).
at::Tensor bytesOf(const at::Tensor &t)
{
    return t.contiguous().reshape(-1).view(at::kByte);
}

} // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroup::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                                    std::vector<at::Tensor> &inputs,
                                                    const c10d::GatherOptions &opts)
{
    const Rooted r = rooted(inputs, outputs, opts.rootRank, rank_, size_, "gather", "output");
    const std::vector<at::Tensor> &outs = r.list; // copied into the closure, as in and root
    const Buf &in = r.buf;
    const int root = r.root;
    const int64_t nbytes = r.t.numel() * r.t.element_size();
    return enqueue(OpType::GATHER, outs, [this, in, outs, root, nbytes](msr_comm_t *c) {
        const uint64_t n = in.count;
        std::vector<uint64_t> sc(size_, 0), sd(size_, 0), rc(size_, 0), rd(size_, 0);
        sc[root] = n;
        void *recv = nullptr;
        if (!outs.empty()) { // the root: block j from rank j
            for (int j = 0; j < size_; j++) {
                rc[j] = n;
                rd[j] = n * j;
            }
            recv = scratch(nbytes * size_).data_ptr();
        }
        raiseIf(msr_comm_alltoallv(c, in.data(), sc.data(), sd.data(), recv, rc.data(), rd.data(),
                                   in.dtype),
                "gather");
        for (size_t j = 0; j < outs.size(); j++)
            copyBytes(outs[j], scratch_.narrow(0, nbytes * j, nbytes));
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::scatter(std::vector<at::Tensor> &outputs,
                                                     std::vector<std::vector<at::Tensor>> &inputs,
                                                     const c10d::ScatterOptions &opts)
{
    const Rooted r = rooted(outputs, inputs, opts.rootRank, rank_, size_, "scatter", "input");
    at::Tensor all; // the root's inputs back to back, as bytes
    if (!r.list.empty()) {
        std::vector<at::Tensor> flat;
        for (const at::Tensor &i : r.list)
            flat.push_back(bytesOf(i));
        all = at::cat(flat);
    }
    return enqueue(OpType::SCATTER, {r.t}, [this, out = r.buf, all, root = r.root](msr_comm_t *c) {
        const uint64_t n = out.count;
        std::vector<uint64_t> sc(size_, 0), sd(size_, 0), rc(size_, 0), rd(size_, 0);
        rc[root] = n;
        if (all.defined()) { // the root: block j to rank j
            for (int j = 0; j < size_; j++) {
                sc[j] = n;
                sd[j] = n * j;
            }
        }
        raiseIf(msr_comm_alltoallv(c, all.defined() ? all.data_ptr() : nullptr, sc.data(),
                                   sd.data(), out.data(), rc.data(), rd.data(), out.dtype),
                "scatter");
        out.copyBack();
    });
}

// outputs[q][i] gets rank q's inputs[i]: every input's bytes back to back
// in one allgather, then copied out of the group's scratch buffer.
c10::intrusive_ptr<c10d::Work>
ProcessGroup::allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                  std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &)
{
    const char *what = "allgather_coalesced";
    if (inputs.empty())
        refuse(std::string(what) + ": no input tensors");
    if (outputs.size() != static_cast<size_t>(size_))
        refuse(std::string(what) + ": " + std::to_string(size_) +
               " output lists, one per rank (got " + std::to_string(outputs.size()) + ")");
    std::vector<at::Tensor> flat, outs;
    for (const at::Tensor &i : inputs) {
        checkCpu(i, what);
        flat.push_back(bytesOf(i));
    }
    for (const std::vector<at::Tensor> &list : outputs) {
        if (list.size() != inputs.size())
            refuse(std::string(what) + ": an output list of " + std::to_string(list.size()) +
                   " tensors for " + std::to_string(inputs.size()) + " inputs");
        for (size_t i = 0; i < list.size(); i++) {
            checkCpu(list[i], what);
            checkSame(inputs[i], list[i], what);
            if (list[i].numel() != inputs[i].numel())
                refuse(std::string(what) + ": output " + std::to_string(i) + " has " +
                       std::to_string(list[i].numel()) + " elements, its input " +
                       std::to_string(inputs[i].numel()));
            outs.push_back(list[i]);
        }
    }
    at::Tensor in = at::cat(flat);
    return enqueue(OpType::ALLGATHER_COALESCED, outs, [this, in, outs](msr_comm_t *c) {
        const int64_t total = in.numel();
        at::Tensor &all = scratch(total * size_);
        raiseIf(msr_comm_allgather(c, in.data_ptr(), all.data_ptr(), total, MSR_DTYPE_U8),
                "allgather_coalesced");
        const size_t per_rank = outs.size() / size_;
        int64_t at = 0;
        for (size_t k = 0; k < outs.size(); k++) {
            if (k % per_rank == 0)
                at = total * static_cast<int64_t>(k / per_rank);
            const int64_t nbytes = outs[k].numel() * outs[k].element_size();
            copyBytes(outs[k], all.narrow(0, at, nbytes));
            at += nbytes;
        }
    });
}

} // namespace msrun_c10d
