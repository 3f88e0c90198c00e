// The HPU kernels of c10d's collective operators ("c10d::allreduce_" ...), as the SDK's bridge registers its own on
// the HPU key (gaudi-pytorch-bridge 1.19.0 distributed/hccl/process_group_hccl_ops.cpp): every path reaches them
// (torch.distributed's functions, functional collectives, DDP's C++ reducer, FSDP). Each runs the operator's CPU kernel
// on aliases of the HPU tensors' memory (no copy), with the private host group of the "hccl" backend, whose CPU
// backend is that same gloo object; its results come back as the caller's HPU tensors.
//
// All in C++, on purpose: a Python kernel would make Python objects (host views, a Python callback on the work's
// future) that gloo's worker thread drops after the collective, taking the GIL there; a process whose last statement
// is a collective then aborts at exit ("terminate called without an active exception") when that thread gets the GIL
// while the interpreter is finalizing.
#include "../HPUDevice.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Type.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lightning_accel::hpu {
namespace {

constexpr c10::DispatchKeySet kBackingKeys{c10::DispatchKey::CPU};
constexpr const char* kProcessGroupClass = "__torch__.torch.classes.c10d.ProcessGroup";
constexpr const char* kReduceOpClass = "__torch__.torch.classes.c10d.ReduceOp";
constexpr const char* kWorkClass = "__torch__.torch.classes.c10d.Work";

// --- The "hccl" backends and their host groups ------------------------------------------------------------------
// Registered by ProcessGroupHCCL when it is built; held weakly, so an entry lives while the backend and the host group
// do (the Python side keeps them while torch knows the group: _hccl_backend._live). Never destroyed: kernels may still
// run on other threads while the process exits.
struct HostGroup {
  c10::weak_intrusive_ptr<c10d::Backend> backend;
  c10::weak_intrusive_ptr<c10d::ProcessGroup> group;
};
std::mutex host_groups_mutex;
auto* const host_groups = new std::unordered_map<const c10d::Backend*, HostGroup>();

void register_hccl_backend(c10d::Backend& backend, c10d::ProcessGroup& host_group) {
  auto owned_backend = c10::intrusive_ptr<c10d::Backend>::unsafe_reclaim_from_nonowning(&backend);
  auto owned_group = c10::intrusive_ptr<c10d::ProcessGroup>::unsafe_reclaim_from_nonowning(&host_group);
  std::lock_guard<std::mutex> lock(host_groups_mutex);
  for (auto it = host_groups->begin(); it != host_groups->end();) {
    it = it->second.backend.expired() || it->second.group.expired() ? host_groups->erase(it) : std::next(it);
  }
  host_groups->insert_or_assign(&backend, HostGroup{c10::weak_intrusive_ptr<c10d::Backend>(owned_backend),
                                                    c10::weak_intrusive_ptr<c10d::ProcessGroup>(owned_group)});
}

std::string quoted(const std::string& text) {
  // As Python's repr of a str: single quotes unless the text has one and no double quote.
  const bool double_quotes = text.find('\'') != std::string::npos && text.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string result(1, quote);
  for (const char c : text) {
    if (c == '\\' || c == quote) {
      result += '\\';
    }
    result += c;
  }
  return result + quote;
}

c10::intrusive_ptr<c10d::ProcessGroup> host_group_of(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const auto backend = group->getBackend(kHPU);
  {
    std::lock_guard<std::mutex> lock(host_groups_mutex);
    const auto it = host_groups->find(backend.get());
    if (it != host_groups->end() && it->second.backend.lock() == backend) {
      auto host_group = it->second.group.lock();
      if (host_group) {
        return host_group;
      }
    }
  }
  // Another backend registered for "hpu" (only the SDK's HCCL is meant to serve it): nothing to run it with.
  auto type = c10::demangle(typeid(*backend).name());
  type = type.substr(type.rfind(':') == std::string::npos ? 0 : type.rfind(':') + 1);
  TORCH_CHECK(false, "The HPU backend of process group ", quoted(group->getGroupName()), " is ", type,
              ", not the 'hccl' backend: on HPUs, create the group with backend='hccl'.");
}

// --- The reduce operations HCCL implements (gaudi-pytorch-bridge 1.19.0 backend/helpers/collective_utils.cpp) -------
const char* reduce_op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

void check_reduce_op(const c10d::ReduceOp& reduce_op) {
  const auto op = reduce_op.op_;
  TORCH_CHECK_VALUE(op == c10d::ReduceOp::MIN || op == c10d::ReduceOp::MAX || op == c10d::ReduceOp::SUM ||
                        op == c10d::ReduceOp::PRODUCT,
                    "op=ReduceOp.", reduce_op_name(op),
                    " is not supported by the 'hccl' backend: HCCL reduces with ReduceOp.MIN, ReduceOp.MAX, "
                    "ReduceOp.SUM, ReduceOp.PRODUCT only. For an average, reduce with ReduceOp.SUM and divide by the "
                    "world size.");
}

bool is_class(const c10::IValue& value, const char* name) {
  return value.isObject() && value.type()->str() == name;
}

// --- One call ---------------------------------------------------------------------------------------------------
class Call {
 public:
  explicit Call(const c10::OperatorHandle& op) : op_(op) {}

  void run(torch::jit::Stack* stack) {
    const auto& schema = op_.schema();
    const size_t first = stack->size() - schema.arguments().size();
    auto arguments = c10::ArrayRef<c10::IValue>(*stack).slice(first);
    // The checks come in the order the SDK's would meet them: the group, then each argument.
    int group_index = -1;
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (is_class(arguments[i], kProcessGroupClass)) {
        TORCH_CHECK(group_index < 0, schema.name(), ": expected one process group among its arguments, found two");
        group_index = static_cast<int>(i);
      }
    }
    c10::intrusive_ptr<c10d::ProcessGroup> host_group;
    if (group_index >= 0) {
      host_group = host_group_of(arguments[group_index].toCustomClass<c10d::ProcessGroup>());
    }
    for (const auto& value : arguments) {
      if (is_class(value, kReduceOpClass)) {
        check_reduce_op(*value.toCustomClass<c10d::ReduceOp>());
      } else {
        check_devices(value);
      }
    }
    for (size_t i = first; i < stack->size(); ++i) {
      (*stack)[i] = to_host((*stack)[i]);
    }
    if (group_index >= 0) {
      (*stack)[first + group_index] = c10::IValue(std::move(host_group));
    }
    if (schema.name() == "c10d::_allgather_base_") {
      rows_per_rank(*stack, first);
    }
    op_.redispatchBoxed(kBackingKeys, stack);
    const size_t results = stack->size() - schema.returns().size();
    for (size_t i = results; i < stack->size(); ++i) {
      (*stack)[i] = to_device((*stack)[i]);
    }
  }

 private:
  static void check_devices(const c10::IValue& value) {
    if (value.isTensor()) {
      const auto& tensor = value.toTensor();
      // What torch says when an "hccl" group meets a host tensor alone (an HPU one sent the call here).
      TORCH_CHECK(!tensor.defined() || tensor.device().type() == kHPU,
                  "No backend type associated with device type ", tensor.device().type());
    } else if (value.isList()) {
      for (const c10::IValue& element : value.toListRef()) {
        check_devices(element);
      }
    }
  }

  c10::IValue to_host(const c10::IValue& value) {
    if (value.isTensor()) {
      const auto& tensor = value.toTensor();
      if (!tensor.defined()) {
        return value;
      }
      TORCH_CHECK_NOT_IMPLEMENTED(tensor.has_storage() && tensor.storage().device_type() == kHPU,
                                  op_.schema().name(),
                                  " reached the emulated HPU's collectives with an HPU tensor that has no device "
                                  "memory (a fake or functional tensor, as torch.compile traces with).");
      auto alias = backing_alias(tensor, false);
      originals_.emplace(alias.unsafeGetTensorImpl(), tensor);
      aliases_.push_back(alias);
      return alias;
    }
    if (value.isTensorList()) {
      const auto list = value.toTensorList();
      c10::List<at::Tensor> aliases;
      aliases.reserve(list.size());
      for (const at::Tensor& tensor : list) {
        aliases.push_back(to_host(tensor).toTensor());
      }
      return aliases;
    }
    if (value.isList()) {  // Tensor[][] and Tensor?[]
      const auto list = value.toList();
      c10::impl::GenericList aliases(list.elementType());
      aliases.reserve(list.size());
      for (const c10::IValue& element : list) {
        aliases.push_back(to_host(element));
      }
      return aliases;
    }
    return value;
  }

  c10::IValue to_device(const c10::IValue& value) const {
    if (value.isTensor()) {
      const auto it = originals_.find(value.toTensor().unsafeGetTensorImpl());
      if (it != originals_.end()) {
        return it->second;
      }
      auto hpu = hpu_tensor_viewed_by(value.toTensor());
      return hpu.defined() ? c10::IValue(std::move(hpu)) : value;
    }
    if (value.isTensorList()) {
      const auto list = value.toTensorList();
      c10::List<at::Tensor> tensors;
      tensors.reserve(list.size());
      for (const at::Tensor& tensor : list) {
        tensors.push_back(to_device(tensor).toTensor());
      }
      return tensors;
    }
    if (value.isList()) {
      const auto list = value.toList();
      c10::impl::GenericList mapped(list.elementType());
      mapped.reserve(list.size());
      for (const c10::IValue& element : list) {
        mapped.push_back(to_device(element));
      }
      return mapped;
    }
    if (is_class(value, kWorkClass)) {
      return c10::IValue(device_work(value.toCustomClass<c10d::Work>(), aliases_));
    }
    return value;
  }

  // all_gather_into_tensor fills the output rank after rank in memory, whatever its shape (SyncBatchNorm gathers into
  // shape (1, world * n); a (world, k * n) output takes (k, n) inputs), as HCCL and NCCL do; gloo splits the output
  // along dimension 0 into pieces of the input's shape instead, so, unless the output already splits so, it gets a
  // view with one row per rank over the same memory (and the input one row), which the results map back to the
  // caller's tensor.
  void rows_per_rank(torch::jit::Stack& stack, size_t first) {
    const auto output = stack[first].toTensor();
    const auto input = stack[first + 1].toTensor();
    const int64_t world = output.numel() / std::max<int64_t>(input.numel(), 1);
    if (!output.is_contiguous() || world <= 0 || output.dim() == 0) {
      return;
    }
    const bool splits_already = input.dim() == output.dim() && output.size(0) == world * input.size(0) &&
                                output.sizes().slice(1) == input.sizes().slice(1);
    if (splits_already) {
      return;
    }
    auto rows = output.view({world, -1});
    originals_.emplace(rows.unsafeGetTensorImpl(), originals_.at(output.unsafeGetTensorImpl()));
    stack[first] = rows;
    stack[first + 1] = input.reshape({1, -1});
  }

  const c10::OperatorHandle& op_;
  // Each alias and the caller's tensor it stands for (the results that are arguments come back as the caller's).
  std::unordered_map<const c10::TensorImpl*, at::Tensor> originals_;
  std::vector<at::Tensor> aliases_;
};

void collective_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) { Call(op).run(stack); }

}  // namespace

void register_collective_kernels() {
  // As the bridge's library registers its c10d kernels when it loads (TORCH_LIBRARY_IMPL(c10d, HPU, m)); c10d's
  // operators are libtorch's, registered before any extension loads.
  static std::once_flag once;
  std::call_once(once, [] {
    static torch::Library library(torch::Library::IMPL, "c10d", c10::DispatchKey::HPU, __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const auto& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("c10d::", 0) != 0) {
        continue;
      }
      const auto op = dispatcher.findOp(name);
      if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::HPU)) {
        continue;
      }
      auto qualified = name.name.substr(6);
      if (!name.overload_name.empty()) {
        qualified += "." + name.overload_name;
      }
      library.impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&collective_on_host>());
    }
  });
}

void bind_host_collectives(pybind11::module& m) {
  m.def("register_hccl_backend", &register_hccl_backend, pybind11::arg("backend"), pybind11::arg("host_group"),
        "Tell the HPU kernels the private host group of an 'hccl' backend (a group whose CPU backend is `backend` "
        "itself); held weakly, for as long as both live.");
}

}  // namespace lightning_accel::hpu
