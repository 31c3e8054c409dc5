// module.cc — the Python face of plait_torch: the backend's class and its
// creator, which plait_torch/__init__.py registers with torch.distributed.
#include <pybind11/chrono.h>
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "process_group_plait.h"

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Plait as a torch.distributed backend (see plait_torch/__init__.py)";
  py::class_<plait_torch::ProcessGroupPlait, c10d::Backend, c10::intrusive_ptr<plait_torch::ProcessGroupPlait>>(
      m, "ProcessGroupPlait")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::duration<double> timeout) {
             return c10::make_intrusive<plait_torch::ProcessGroupPlait>(
                 store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  m.def("library_path", &plait_torch::ProcessGroupPlait::libraryPath,
        "The file Plait's C API was loaded from (libplait.so in this package)");
  m.def("cuda_built", &plait_torch::deviceBuilt,
        "Whether CUDA tensors run (this module was built against a torch with CUDA)");
  m.def("version", [] {
    int v = 0;
    ncclGetVersion(&v);
    return v;
  });
}
