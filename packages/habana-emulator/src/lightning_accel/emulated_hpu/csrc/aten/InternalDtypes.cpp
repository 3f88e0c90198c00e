// The dtypes the SDK computes in. Gaudi has no float64 and, in lazy mode (or on first-generation Gaudi), no int64:
// habana_helpers::getInternalDtype maps kDouble to kFloat always and kLong to kInt unless int64 is supported
// (gaudi-pytorch-bridge 1.19 habana_kernels/kernel_utils.cpp, PT_ENABLE_INT64_SUPPORT in scripts/env_flags.yaml).
// The tensors keep their dtype; their values have float32 precision and wrap at 32 bits, as on the card.
#include "../HPUDevice.h"

#include <atomic>

namespace lightning_accel::hpu {
namespace {

// The card has no float64 in any mode; int64 is on by default in eager mode (the SDK's lazy mode turns it off).
std::atomic<bool> double_as_float{true};
std::atomic<bool> long_as_int{false};

}  // namespace

void set_internal_dtypes(bool float64_as_float32, bool int64_as_int32) {
  double_as_float.store(float64_as_float32);
  long_as_int.store(int64_as_int32);
}

bool narrows(c10::ScalarType dtype) {
  return (dtype == c10::ScalarType::Double && double_as_float.load(std::memory_order_relaxed)) ||
         (dtype == c10::ScalarType::Long && long_as_int.load(std::memory_order_relaxed));
}

void to_internal_dtype(const at::Tensor& hpu_tensor) {
  if (!hpu_tensor.defined() || hpu_tensor.numel() == 0 || !narrows(hpu_tensor.scalar_type())) {
    return;
  }
  auto alias = backing_alias(hpu_tensor, /*resizable=*/false);
  const auto internal = hpu_tensor.scalar_type() == c10::ScalarType::Double ? at::kFloat : at::kInt;
  alias.copy_(alias.to(internal));
}

}  // namespace lightning_accel::hpu
