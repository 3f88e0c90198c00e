// Every ATen operator without an HPU kernel of its own runs here: its HPU tensors are swapped for aliases on the
// backing device (same memory, no copy), the backing device's own kernel runs, and its results come back as HPU
// tensors: the argument itself for in-place and out= results, a view of the argument's storage for views, and the
// kernel's fresh memory, adopted as device memory, for everything else.
#include "../HPUDevice.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace lightning_accel::hpu {
namespace {

constexpr c10::DispatchKeySet kBackingKeys{c10::DispatchKey::CPU};

// The real device's own kernels and who hears of the operators outside them (set_fallback_listener). Replaced whole,
// never changed in place, so a call that took a copy reads one consistent pair.
struct FallbackListener {
  std::unordered_set<std::string> operators_with_kernels;
  FallbackHandler handler;
};
std::mutex listener_mutex;
std::shared_ptr<const FallbackListener> listener;
std::atomic<uint64_t> listener_generation{0};

std::shared_ptr<const FallbackListener> current_listener() {
  std::lock_guard<std::mutex> lock(listener_mutex);
  return listener;
}

// What the fallback needs to know of an operator's arguments, read once from its schema.
struct Plan {
  size_t num_args = 0;
  c10::SmallVector<size_t, 8> tensor_args;  // Tensor, Tensor?, Tensor[] and Tensor?[] arguments
  c10::SmallVector<bool, 8> writes;          // per tensor argument: does the operator write to it
  c10::SmallVector<size_t, 2> device_args;
  int generator_arg = -1;
  // Operators whose CUDA kernels take host tensors beside device tensors (host index tensors): the HPU allows them
  // alike. Everywhere else a host tensor with dimensions is torch's two-devices error, as on a real device.
  bool host_tensors_allowed = false;
  bool reads_to_host = false;  // tensor.item(): the host needs the value now
  std::string name;
  // Whether the real device runs this operator through its CPU fallback (no kernel of its own), as of the listener
  // generation it was worked out for.
  bool reported = false;
  uint64_t reported_generation = UINT64_MAX;
};

bool is_kind(const c10::TypePtr& type, c10::TypeKind kind) {
  if (type->kind() == kind) {
    return true;
  }
  if (type->kind() == c10::TypeKind::OptionalType) {
    return type->castRaw<c10::OptionalType>()->getElementType()->kind() == kind;
  }
  return false;
}

bool holds_tensors(const c10::TypePtr& type) {
  if (is_kind(type, c10::TypeKind::TensorType)) {
    return true;
  }
  if (type->kind() == c10::TypeKind::ListType) {
    return is_kind(type->castRaw<c10::ListType>()->getElementType(), c10::TypeKind::TensorType);
  }
  return false;
}

Plan make_plan(const c10::FunctionSchema& schema) {
  Plan plan;
  const auto& args = schema.arguments();
  plan.num_args = args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& type = args[i].type();
    if (holds_tensors(type)) {
      plan.tensor_args.push_back(i);
      const auto* alias = args[i].alias_info();
      plan.writes.push_back(alias != nullptr && alias->isWrite());
    } else if (is_kind(type, c10::TypeKind::DeviceObjType)) {
      plan.device_args.push_back(i);
    } else if (is_kind(type, c10::TypeKind::GeneratorType)) {
      plan.generator_arg = static_cast<int>(i);
    }
  }
  plan.name = schema.name();
  if (!schema.overload_name().empty()) {
    plan.name += "." + schema.overload_name();
  }
  const auto& base = schema.name();
  plan.reads_to_host = base == "aten::_local_scalar_dense";
  plan.host_tensors_allowed = base == "aten::index" || base == "aten::index_put_" || base == "aten::index_put" ||
                              base == "aten::_index_put_impl_" || base == "aten::_unsafe_index" ||
                              base == "aten::_unsafe_index_put";
  return plan;
}

Plan& plan_for(const c10::FunctionSchema& schema) {
  thread_local std::unordered_map<const c10::FunctionSchema*, Plan> plans;
  auto it = plans.find(&schema);
  if (it == plans.end()) {
    it = plans.emplace(&schema, make_plan(schema)).first;
  }
  return it->second;
}

// The real SDK's boxed fallback (hpu_ops/cpu_fallback.cpp) sees exactly the operators without an HPU kernel of its
// own; here they arrive mixed with the many the SDK has kernels for, so the listener's list tells them apart.
void report_fallback(Plan& plan) {
  const uint64_t generation = listener_generation.load(std::memory_order_acquire);
  if (plan.reported_generation != generation) {
    const auto current = current_listener();
    plan.reported = current != nullptr && current->operators_with_kernels.count(plan.name) == 0;
    plan.reported_generation = generation;
  }
  if (!plan.reported) {
    return;
  }
  const auto current = current_listener();
  if (current == nullptr) {
    return;
  }
  const auto refusal = current->handler(plan.name);
  TORCH_CHECK(!refusal.has_value(), *refusal);
}

// One HPU argument and the alias its kernel sees.
struct Swap {
  at::Tensor hpu;
  at::Tensor alias;
  const void* data;  // the alias's memory before the kernel
  bool writes;
};

class Call {
 public:
  explicit Call(const Plan& plan) : plan_(plan) {}

  at::Tensor to_backing(const at::Tensor& tensor, bool writes) {
    if (!tensor.defined()) {
      return tensor;
    }
    const auto type = tensor.device().type();
    if (type == kHPU) {
      TORCH_CHECK_NOT_IMPLEMENTED(tensor.has_storage() && tensor.storage().device_type() == kHPU, plan_.name,
                                  " reached the emulated HPU's kernels with an HPU tensor that has no device memory (a "
                                  "fake or functional tensor, as torch.compile traces with): the operator needs a meta "
                                  "kernel or a decomposition to be traced on the HPU.");
      saw_hpu_ = true;
      auto alias = backing_alias(tensor, writes);
      swaps_.push_back({tensor, alias, alias.storage().data(), writes});
      return alias;
    }
    if (tensor.dim() > 0 && first_foreign_.empty()) {
      first_foreign_ = tensor.device().str();
    }
    return tensor;
  }

  void swap_arguments(torch::jit::Stack& stack, size_t first) {
    for (size_t k = 0; k < plan_.tensor_args.size(); ++k) {
      auto& value = stack[first + plan_.tensor_args[k]];
      const bool writes = plan_.writes[k];
      if (value.isTensor()) {
        value = to_backing(value.toTensor(), writes);
      } else if (value.isTensorList()) {
        auto list = value.toTensorList();
        c10::List<at::Tensor> swapped;
        swapped.reserve(list.size());
        for (const at::Tensor& tensor : list) {
          swapped.push_back(to_backing(tensor, writes));
        }
        value = std::move(swapped);
      } else if (value.isList()) {  // Tensor?[]
        auto list = value.toOptionalTensorList();
        c10::List<std::optional<at::Tensor>> swapped;
        swapped.reserve(list.size());
        for (const std::optional<at::Tensor>& tensor : list) {
          swapped.push_back(tensor.has_value() ? std::optional<at::Tensor>(to_backing(*tensor, writes))
                                               : std::nullopt);
        }
        value = std::move(swapped);
      }
    }
    for (const auto index : plan_.device_args) {
      auto& value = stack[first + index];
      if (value.isDevice() && value.toDevice().type() == kHPU) {
        check_index(value.toDevice().index());
        saw_hpu_ = true;
        value = c10::Device(c10::DeviceType::CPU);
      }
    }
    if (plan_.generator_arg >= 0) {
      auto& value = stack[first + plan_.generator_arg];
      if (value.isNone()) {
        value = backing_generator(default_generator());
      } else if (value.isGenerator()) {
        const auto& generator = value.toGenerator();
        TORCH_CHECK(generator.device().type() == kHPU, plan_.name,
                    ": expected a generator of the 'hpu' device for HPU tensors, but got one of '",
                    generator.device().str(), "'. Make it with torch.Generator(device='hpu').");
        value = backing_generator(generator);
      }
    }
    TORCH_CHECK(!saw_hpu_ || first_foreign_.empty() || plan_.host_tensors_allowed,
                "Expected all tensors to be on the same device, but found at least two devices, hpu:0 and ",
                first_foreign_, "! (when checking the arguments of ", plan_.name, ")");
  }

  // After the kernel: what it did to an HPU argument's alias happens to the argument (a reallocation, new geometry).
  void write_back() {
    for (auto& swap : swaps_) {
      if (!swap.writes) {
        continue;
      }
      auto* alias_storage = swap.alias.storage().unsafeGetStorageImpl();
      auto* hpu_impl = swap.hpu.unsafeGetTensorImpl();
      if (alias_storage->data() != swap.data) {
        // The kernel resized an out= argument: the new memory, from the host allocator, becomes the HPU storage's.
        const size_t nbytes = alias_storage->nbytes();
        auto fresh = alias_storage->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
        auto* hpu_storage = swap.hpu.storage().unsafeGetStorageImpl();
        hpu_storage->set_data_ptr_noswap(wrap_backing(std::move(fresh), nbytes));
        hpu_storage->set_nbytes(nbytes);
        swap.data = nullptr;
      }
      if (swap.alias.sizes() != swap.hpu.sizes() || swap.alias.strides() != swap.hpu.strides() ||
          swap.alias.storage_offset() != swap.hpu.storage_offset()) {
        hpu_impl->set_sizes_and_strides(swap.alias.sizes(), swap.alias.strides(), swap.alias.storage_offset());
      }
      to_internal_dtype(swap.hpu);
    }
  }

  at::Tensor to_hpu(const at::Tensor& result) const {
    if (!result.defined() || result.device().type() != c10::DeviceType::CPU) {
      return result;
    }
    if (result.layout() != c10::kStrided) {
      refuse_layout(plan_.name, result.layout());
    }
    // A quantized host result would become an HPU tensor of a quantized dtype without its quantizer: refused, as
    // torch's dispatcher refuses quantized HPU tensors (the QuantizedHPU key has no kernels).
    TORCH_CHECK_NOT_IMPLEMENTED(!result.is_quantized(), plan_.name,
                                ": the emulated HPU has no quantized tensors (qint8, quint8, qint32); Gaudi's SDK has no "
                                "quantized kernels either and quantizes to fp8 through Intel Neural Compressor "
                                "(HPUPrecisionPlugin('fp8').convert_modules(model, inference=True, ...)). Quantize on "
                                "the host: tensor.cpu().");
    for (const auto& swap : swaps_) {
      if (result.unsafeGetTensorImpl() == swap.alias.unsafeGetTensorImpl()) {
        return swap.hpu;
      }
    }
    if (result.has_storage()) {
      const auto* storage = result.storage().unsafeGetStorageImpl();
      for (const auto& swap : swaps_) {
        if (storage == swap.alias.storage().unsafeGetStorageImpl()) {
          return hpu_view_like(swap.hpu, result);
        }
      }
    }
    return adopt(result);
  }

  void return_results(torch::jit::Stack& stack, size_t num_returns) const {
    if (!saw_hpu_) {
      return;
    }
    const size_t first = stack.size() - num_returns;
    for (size_t i = first; i < stack.size(); ++i) {
      auto& value = stack[i];
      if (value.isTensor()) {
        value = to_hpu(value.toTensor());
        to_internal_dtype(value.toTensor());
      } else if (value.isTensorList()) {
        auto list = value.toTensorList();
        for (size_t k = 0; k < list.size(); ++k) {
          auto result = to_hpu(list.get(k));
          to_internal_dtype(result);
          list.set(k, result);
        }
      }
    }
  }

 private:
  const Plan& plan_;
  c10::SmallVector<Swap, 4> swaps_;
  std::string first_foreign_;
  bool saw_hpu_ = false;
};

void run_on_backing_kernels(const c10::OperatorHandle& op, torch::jit::Stack* stack, const Plan& plan) {
  const auto& schema = op.schema();
  if (plan.reads_to_host) {
    end_lazy_graph();  // the host reads a value: Gaudi runs (and compiles) the graph built so far, then copies it
  } else {
    record_lazy_operator(&schema, c10::ArrayRef<c10::IValue>(*stack).slice(stack->size() - plan.num_args));
  }
  Call call(plan);
  call.swap_arguments(*stack, stack->size() - plan.num_args);
  try {
    op.redispatchBoxed(kBackingKeys, stack);
  } catch (const c10::NotImplementedError& error) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, plan.name, " is not implemented for the emulated HPU: it runs operators with ",
                                "the kernels of its backing device (cpu), which has none for it.\n",
                                error.what_without_backtrace());
  }
  call.write_back();
  call.return_results(*stack, schema.returns().size());
}

// Operators without a kernel of the emulated device: on the real one, those outside its kernel list are its CPU
// fallbacks.
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Plan& plan = plan_for(op.schema());
  report_fallback(plan);
  run_on_backing_kernels(op, stack, plan);
}

// Operators with a generic kernel, sent to the CPU kernel for exact results: without a kernel of its own the real
// device runs the generic kernel (a decomposition into other operators), not its CPU fallback, so none is reported.
void routed_to_backing_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_backing_kernels(op, stack, plan_for(op.schema()));
}

}  // namespace

TORCH_LIBRARY_IMPL(_, HPU, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }

void route_to_backing_kernels() {
  // An operator with a CPU kernel and a generic (CompositeExplicitAutograd) one would run the generic one on the HPU:
  // a different decomposition (native_layer_norm, addr) or an extra out= round trip (every structured operator). The
  // HPU runs the CPU kernel itself instead, through the fallback, so its results are the host's bit for bit.
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::HPU, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    const auto op = dispatcher.findOp(name);
    if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::HPU)) {
      continue;
    }
    if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
      auto qualified = name.name.substr(6);
      if (!name.overload_name.empty()) {
        qualified += "." + name.overload_name;
      }
      library.impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&routed_to_backing_kernel>());
    }
  }
}

void set_fallback_listener(std::unordered_set<std::string> operators_with_kernels, FallbackHandler handler) {
  // The replaced listener is released after the lock, by the caller's thread (the Python one, holding the GIL).
  std::shared_ptr<const FallbackListener> replaced;
  {
    std::lock_guard<std::mutex> lock(listener_mutex);
    replaced = std::move(listener);
    if (handler) {
      listener = std::make_shared<const FallbackListener>(
          FallbackListener{std::move(operators_with_kernels), std::move(handler)});
    }
    listener_generation.fetch_add(1, std::memory_order_acq_rel);
  }
}

}  // namespace lightning_accel::hpu
