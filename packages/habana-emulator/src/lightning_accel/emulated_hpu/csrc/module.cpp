// The Python surface of the device: what the emulated SDK's hpu.memory and hpu.random read. Loading this module is
// what registers the device (allocator, guard, hooks, kernels) with torch.
#include "HPUDevice.h"

#include <torch/extension.h>

namespace {

pybind11::dict memory_stats() {
  const auto stats = lightning_accel::hpu::memory_stats();
  pybind11::dict result;
  result["in_use"] = stats.in_use;
  result["peak"] = stats.peak;
  result["num_allocs"] = stats.num_allocs;
  result["num_frees"] = stats.num_frees;
  result["active_allocs"] = stats.active_allocs;
  result["max_alloc_size"] = stats.max_alloc_size;
  result["limit"] = stats.limit;
  return result;
}

// A Python callable the device may call from any thread (autograd's device thread too), and drop without the GIL.
std::shared_ptr<pybind11::object> hold(pybind11::object callable) {
  return std::shared_ptr<pybind11::object>(new pybind11::object(std::move(callable)), [](pybind11::object* held) {
    if (Py_IsInitialized() == 0) {
      return;  // the interpreter is gone: leaking the reference is all that is safe
    }
    pybind11::gil_scoped_acquire gil;
    delete held;
  });
}

void set_fallback_listener(const std::vector<std::string>& operators_with_kernels,
                           std::optional<pybind11::function> listener) {
  lightning_accel::hpu::FallbackHandler handler;
  if (listener.has_value()) {
    handler = [held = hold(*listener)](const std::string& name) -> std::optional<std::string> {
      if (Py_IsInitialized() == 0) {
        return std::nullopt;
      }
      pybind11::gil_scoped_acquire gil;
      try {
        pybind11::object refusal = (*held)(name);
        if (refusal.is_none()) {
          return std::nullopt;
        }
        return refusal.cast<std::string>();
      } catch (pybind11::error_already_set& error) {
        return std::string("the emulated SDK's CPU-fallback listener failed on ") + name + ": " + error.what();
      }
    };
  }
  lightning_accel::hpu::set_fallback_listener({operators_with_kernels.begin(), operators_with_kernels.end()},
                                              std::move(handler));
}

void set_lazy_graph_listener(std::optional<pybind11::function> listener) {
  lightning_accel::hpu::LazyGraphHandler handler;
  if (listener.has_value()) {
    handler = [held = hold(*listener)](uint64_t identity, int64_t operators) {
      if (Py_IsInitialized() == 0) {
        return;
      }
      pybind11::gil_scoped_acquire gil;
      try {
        (*held)(identity, operators);
      } catch (pybind11::error_already_set& error) {
        error.discard_as_unraisable("the emulated SDK's lazy-graph listener");  // a metric must not fail the work
      }
    };
  }
  lightning_accel::hpu::set_lazy_graph_listener(std::move(handler));
}

}  // namespace

namespace lightning_accel::hpu {
void bind_host_collectives(pybind11::module& m);  // distributed/HostCollectives.cpp
}  // namespace lightning_accel::hpu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  lightning_accel::hpu::route_to_backing_kernels();
  lightning_accel::hpu::register_collective_kernels();
  lightning_accel::hpu::bind_host_collectives(m);
  m.doc() = "The emulated Gaudi device: c10's HPU device type and dispatch key, backed by host memory.";
  m.def("memory_stats", &memory_stats, "Exact byte and storage counts of the device memory.");
  m.def("reset_peak_memory_stats", &lightning_accel::hpu::reset_peak_memory_stats,
        "Make the peak start again from the memory in use now.");
  m.def("set_memory_limit", &lightning_accel::hpu::set_memory_limit, pybind11::arg("bytes"),
        "Bytes the device may hold (0: no limit); an allocation past them fails as the SDK's does on a full card: a "
        "RuntimeError '[Rank:<RANK>] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::<bytes> (<MiB>)MB'.");
  m.def("set_internal_dtypes", &lightning_accel::hpu::set_internal_dtypes, pybind11::arg("float64_as_float32"),
        pybind11::arg("int64_as_int32"),
        "What the SDK computes float64 and int64 in: float32 precision always, 32-bit int64 in lazy mode.");
  m.def("backing_alias", [](const at::Tensor& t) { return lightning_accel::hpu::backing_alias(t, false); },
        pybind11::arg("tensor"),
        "A tensor of the backing device viewing exactly the memory of an HPU tensor (no copy): for the SDK layers "
        "that hand HPU memory to host libraries (collectives, graph replay).");
  m.def("adopt", &lightning_accel::hpu::adopt, pybind11::arg("tensor"),
        "An HPU tensor owning the memory of a fresh tensor of the backing device (no copy); counted as device memory.");
  m.def("set_fallback_listener", &set_fallback_listener, pybind11::arg("operators_with_kernels"),
        pybind11::arg("listener"),
        "Report each operator outside `operators_with_kernels` that runs through the boxed fallback (the real "
        "device's CPU fallbacks) to `listener(name)`, which may refuse it by returning a message; None stops it.");
  m.def("set_lazy_graph_listener", &set_lazy_graph_listener, pybind11::arg("listener"),
        "Record lazy mode's graphs and call `listener(identity, operators)` as each ends; None stops recording.");
  m.def("end_lazy_graph", &lightning_accel::hpu::end_lazy_graph,
        "End the graph being built (a step mark) and report it, unless it is empty.");
  m.def("discard_lazy_graph", &lightning_accel::hpu::discard_lazy_graph,
        "Forget the graph being built without reporting it.");
  pybind11::enum_<lightning_accel::hpu::CastPolicy>(m, "CastPolicy")
      .value("lower_precision_fp", lightning_accel::hpu::CastPolicy::lower_precision_fp)
      .value("fp32", lightning_accel::hpu::CastPolicy::fp32)
      .value("promote", lightning_accel::hpu::CastPolicy::promote)
      .value("lower_first_arg", lightning_accel::hpu::CastPolicy::lower_first_arg);
  m.def("register_autocast", &lightning_accel::hpu::register_autocast, pybind11::arg("operators"),
        "Register the SDK's autocast kernels on AutocastHPU: `operators` is a list of (ATen overload name, "
        "CastPolicy), e.g. ('add.Tensor', CastPolicy.promote); every other operator falls through. Once per process.");
  m.def("default_generator", &lightning_accel::hpu::default_generator,
        "The HPU's default generator, a torch.Generator of device 'hpu'.");
}
