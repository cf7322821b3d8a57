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

} // namespace

PYBIND11_MODULE(_msrun_c10d, m)
{
    m.doc() = "torch.distributed over libmsrun (import msrun.torch instead)";
    // the base classes' Python types must exist first
    py::module_::import("torch.distributed");

    py::class_<msrun_c10d::Store, c10::intrusive_ptr<msrun_c10d::Store>, c10d::Store>(m, "Store")
        .def(py::init(
                 [](uintptr_t ctx) { return c10::make_intrusive<msrun_c10d::Store>(ctxOf(ctx)); }),
             py::arg("ctx"));

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
