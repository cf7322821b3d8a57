// The tensor rules every method of the msrun process group shares: which
// tensors libmsrun takes, how a tensor becomes a contiguous buffer, and the
// refusals of bad arguments (std::invalid_argument: Python's ValueError).
#include <stdexcept>

#include "msrun_c10d.hpp"

namespace msrun_c10d
{

[[noreturn]] void refuse(const std::string &what)
{
    throw std::invalid_argument("msrun backend: " + what);
}

bool dtypeOf(at::ScalarType type, msr_dtype_t *dtype_p)
{
    switch (type) {
    case at::kFloat:
        *dtype_p = MSR_DTYPE_F32;
        return true;
    case at::kDouble:
        *dtype_p = MSR_DTYPE_F64;
        return true;
    case at::kHalf:
        *dtype_p = MSR_DTYPE_F16;
        return true;
    case at::kBFloat16:
        *dtype_p = MSR_DTYPE_BF16;
        return true;
    case at::kInt:
        *dtype_p = MSR_DTYPE_I32;
        return true;
    case at::kLong:
        *dtype_p = MSR_DTYPE_I64;
        return true;
    case at::kByte:
        *dtype_p = MSR_DTYPE_U8;
        return true;
    default:
        return false;
    }
}

void checkCpu(const at::Tensor &t, const char *what)
{
    if (!t.defined())
        refuse(std::string(what) + ": an undefined tensor");
    if (!t.device().is_cpu() || t.is_sparse())
        refuse(std::string(what) + ": only dense CPU tensors are supported (got " +
               t.device().str() + (t.is_sparse() ? ", sparse" : "") + ")");
}

Buf bufOf(const at::Tensor &t, bool reducing, const char *what)
{
    checkCpu(t, what);
    Buf b;
    b.user = t;
    b.buf = t.is_contiguous() ? t : t.contiguous();
    if (dtypeOf(t.scalar_type(), &b.dtype)) {
        b.count = static_cast<uint64_t>(t.numel());
    } else if (!reducing) {
        b.dtype = MSR_DTYPE_U8;
        b.count = static_cast<uint64_t>(t.numel()) * t.element_size();
    } else {
        refuse(std::string(what) + ": dtype " + c10::toString(t.scalar_type()) +
               " cannot be reduced (float32, float64, float16, bfloat16, int32, int64, "
               "uint8 can)");
    }
    return b;
}

const at::Tensor &single(const std::vector<at::Tensor> &tensors, const char *what)
{
    if (tensors.size() != 1)
        refuse(std::string(what) + ": one tensor per call (got " + std::to_string(tensors.size()) +
               ")");
    return tensors[0];
}

void checkRoot(int64_t root, int size, const char *what)
{
    if (root < 0 || root >= size)
        refuse(std::string(what) + ": root " + std::to_string(root) + " outside 0.." +
               std::to_string(size - 1));
}

void checkSame(const at::Tensor &a, const at::Tensor &b, const char *what)
{
    if (a.scalar_type() != b.scalar_type())
        refuse(std::string(what) + ": tensors of different dtypes (" +
               c10::toString(a.scalar_type()) + ", " + c10::toString(b.scalar_type()) + ")");
}

} // namespace msrun_c10d
