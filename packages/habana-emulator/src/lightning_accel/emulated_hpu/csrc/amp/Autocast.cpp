// The SDK's autocast for "hpu" on c10's AutocastHPU dispatch key, as the bridge's autocast kernels (gaudi-pytorch-bridge
// hpu_ops/autocast_helpers.h, Hpu_WrapFunction_ and cast()): cast the eligible inputs, then call the operator again
// with AutocastHPU excluded, so the casts and the operator run below, through autograd.
//
// The bridge generates one typed kernel per listed operator at build time and registers those its lists name when
// the library loads; its lists come from files named in the environment, so here the operators are known only at
// load too. One boxed kernel per policy serves every operator overload: it walks the arguments on the stack.
#include "../HPUDevice.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <memory>
#include <mutex>

namespace lightning_accel::hpu {
namespace {

// The bridge's is_eligible: a defined floating-point HPU tensor that is not float64.
bool eligible(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == kHPU && tensor.is_floating_point() &&
         tensor.scalar_type() != at::kDouble;
}

// Casts are never cached on the HPU (the bridge's cast(): cached casts would leave persistent tensors in graphs).
at::Tensor cast(const at::Tensor& tensor, at::ScalarType dtype) {
  return eligible(tensor) && tensor.scalar_type() != dtype ? tensor.to(dtype) : tensor;
}

// A Tensor, Tensor? (None passes through), Tensor[] or Tensor?[] argument, replaced on the stack by its cast. A list
// is replaced by a new one: the caller's list may be shared (c10::List has reference semantics).
void cast_argument(c10::IValue& value, at::ScalarType dtype) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (eligible(tensor) && tensor.scalar_type() != dtype) {
      value = tensor.to(dtype);
    }
  } else if (value.isTensorList()) {
    c10::List<at::Tensor> cast_list;
    for (const at::Tensor& tensor : value.toTensorList().vec()) {
      cast_list.push_back(cast(tensor, dtype));
    }
    value = std::move(cast_list);
  } else if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> cast_list;
    for (const std::optional<at::Tensor>& tensor : value.toOptionalTensorList().vec()) {
      cast_list.push_back(tensor.has_value() ? std::optional<at::Tensor>(cast(*tensor, dtype)) : std::nullopt);
    }
    value = std::move(cast_list);
  }
}

// ATen's at::autocast::prioritize over every tensor argument: float64 is ignored, float32 wins over the lower dtype,
// and two different lower dtypes are its error.
at::ScalarType promoted(at::ScalarType lower, const c10::IValue* first, const c10::IValue* last) {
  at::ScalarType current = lower;
  for (const c10::IValue* value = first; value != last; ++value) {
    if (value->isTensor()) {
      current = at::autocast::prioritize(current, value->toTensor(), kHPU);
    } else if (value->isTensorList()) {
      for (const at::Tensor& tensor : value->toTensorList().vec()) {
        current = at::autocast::prioritize(current, tensor, kHPU);
      }
    } else if (value->isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& tensor : value->toOptionalTensorList().vec()) {
        if (tensor.has_value()) {
          current = at::autocast::prioritize(current, *tensor, kHPU);
        }
      }
    }
  }
  return current;
}

class AutocastKernel final : public c10::OperatorKernel {
 public:
  explicit AutocastKernel(CastPolicy policy) : policy_(policy) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) const {
    const size_t count = op.schema().arguments().size();
    c10::IValue* first = stack->data() + (stack->size() - count);
    c10::IValue* last = stack->data() + stack->size();
    const at::ScalarType lower = at::autocast::get_autocast_dtype(kHPU);
    switch (policy_) {
      case CastPolicy::lower_precision_fp:
        cast_all(first, last, lower);
        break;
      case CastPolicy::lower_first_arg:
        if (count > 0) {
          cast_argument(*first, lower);
        }
        break;
      case CastPolicy::fp32:
        cast_all(first, last, at::kFloat);
        break;
      case CastPolicy::promote:
        cast_all(first, last, promoted(lower, first, last));
        break;
    }
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastHPU);
    op.callBoxed(stack);
  }

 private:
  static void cast_all(c10::IValue* first, c10::IValue* last, at::ScalarType dtype) {
    for (c10::IValue* value = first; value != last; ++value) {
      cast_argument(*value, dtype);
    }
  }

  CastPolicy policy_;
};

std::mutex registration_mutex;
std::unique_ptr<torch::Library> fallthrough_library;
std::unique_ptr<torch::Library> kernel_library;

}  // namespace

void register_autocast(const std::vector<std::pair<std::string, CastPolicy>>& operators) {
  std::lock_guard<std::mutex> lock(registration_mutex);
  TORCH_CHECK(kernel_library == nullptr, "the HPU's autocast kernels are registered once per process, when the "
              "SDK loads; they are registered already");
  // Every operator outside the lists runs as if autocast were off (the bridge's fallthrough for AutocastHPU).
  auto fallthrough = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::AutocastHPU,
                                                      __FILE__, __LINE__);
  fallthrough->fallback(torch::CppFunction::makeFallthrough());
  auto kernels = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::AutocastHPU,
                                                  __FILE__, __LINE__);
  for (const auto& [name, policy] : operators) {
    kernels->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutocastKernel>(policy)));
  }
  fallthrough_library = std::move(fallthrough);
  kernel_library = std::move(kernels);
}

}  // namespace lightning_accel::hpu
