// The Python module _msrun_c10d: the process group and the store as
// subclasses of torch.distributed's ProcessGroup and Store (msrun/torch.py
// registers the backend). The libmsrun context is the Python package's
// (msrun.init()), passed as its address.
#include <torch/csrc/utils/pybind.h>

#include "msrun_c10d.hpp"

namespace py = pybind11;

namespace
{

msr_ctx_t *ctxOf(uintptr_t address)
{
    return reinterpret_cast<msr_ctx_t *>(address);
}

// The store Python makes: its watches' callbacks take the GIL, so one
// dropped by Python (holding the GIL) lets go of it while it stops them.
class PyStore : public msrun_c10d::Store
{
  public:
    using msrun_c10d::Store::Store;
    ~PyStore() override
    {
        if (Py_IsInitialized() && PyGILState_Check()) {
            py::gil_scoped_release release;
            stopWatches();
        } else {
            stopWatches();
        }
    }
};

py::object bytesOr(const c10::optional<std::string> &v)
{
    return v ? py::object(py::bytes(*v)) : py::object(py::none());
}

// watch_key(key, callback): callback(old, new) with bytes or None from the
// store's thread, under the GIL; what it raises is printed (as Python's
// unraisable exceptions are) and the watch goes on.
void watchKey(msrun_c10d::Store &store, const std::string &key, py::function fn)
{
    // the function is released under the GIL, whichever thread drops it
    auto held = std::shared_ptr<py::function>(new py::function(std::move(fn)), [](py::function *f) {
        py::gil_scoped_acquire gil;
        delete f;
    });
    c10d::WatchKeyCallback cb = [held](c10::optional<std::string> old,
                                       c10::optional<std::string> now) {
        py::gil_scoped_acquire gil;
        try {
            (*held)(bytesOr(old), bytesOr(now));
        } catch (py::error_already_set &e) {
            e.discard_as_unraisable("msrun store watch_key callback");
        }
    };
    py::gil_scoped_release release;
    store.watchKey(key, std::move(cb));
}

} // namespace

PYBIND11_MODULE(_msrun_c10d, m)
{
    m.doc() = "torch.distributed over libmsrun (import msrun.torch instead)";
    // the base classes' Python types must exist first
    py::module_::import("torch.distributed");

    py::class_<msrun_c10d::Store, c10::intrusive_ptr<msrun_c10d::Store>, c10d::Store>(m, "Store")
        .def(py::init([](uintptr_t ctx) -> c10::intrusive_ptr<msrun_c10d::Store> {
                 return c10::make_intrusive<PyStore>(ctxOf(ctx));
             }),
             py::arg("ctx"))
        .def("watch_key", &watchKey, py::arg("key"), py::arg("callback"))
        .def("stop_watches", &msrun_c10d::Store::stopWatches,
             py::call_guard<py::gil_scoped_release>());

    py::class_<msrun_c10d::ProcessGroup, c10::intrusive_ptr<msrun_c10d::ProcessGroup>,
               c10d::ProcessGroup>(m, "ProcessGroupMsrun")
        .def_static(
            "world",
            [](uintptr_t ctx, int64_t timeout_ms) {
                return msrun_c10d::ProcessGroup::world(ctxOf(ctx), timeout_ms);
            },
            py::arg("ctx"), py::arg("timeout_ms"), py::call_guard<py::gil_scoped_release>())
        .def(
            "split",
            [](msrun_c10d::ProcessGroup &pg, int color, int key, int64_t timeout_ms) {
                return pg.split(color, key, timeout_ms);
            },
            py::arg("color"), py::arg("key"), py::arg("timeout_ms"),
            py::call_guard<py::gil_scoped_release>())
        .def("shutdown", &msrun_c10d::ProcessGroup::shutdown,
             py::call_guard<py::gil_scoped_release>());

    m.def("shutdown_all", &msrun_c10d::shutdownAll, py::call_guard<py::gil_scoped_release>());
    m.attr("TAG_MAX") = MSR_COMM_TAG_MAX;
}
