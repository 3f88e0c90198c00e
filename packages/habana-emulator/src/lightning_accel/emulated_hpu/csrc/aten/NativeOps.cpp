// Operators the HPU implements itself: the ones that create, reshape, resize or rebind HPU storage, and copies to and
// from other devices. They never run a backing kernel on an alias, since their result must be HPU memory or a view of it.
#include "../HPUDevice.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace lightning_accel::hpu {
namespace {

constexpr c10::DispatchKeySet kHPUKeys{c10::DispatchKey::HPU};

void check_device(std::optional<c10::Device> device) {
  if (device.has_value() && device->type() == kHPU && device->has_index()) {
    check_index(device->index());
  }
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_device(device);
  return at::detail::empty_generic(size, allocator(), kHPUKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_device(device);
  return at::detail::empty_strided_generic(size, stride, allocator(), kHPUKeys, c10::dtype_or_default(dtype));
}

at::Tensor on_backing(const at::Tensor& tensor) {
  return tensor.device().type() == kHPU ? backing_alias(tensor, /*resizable=*/false) : tensor;
}

// Copies between the HPU and any other device, and within the HPU: the backing copy kernel does dtype conversion,
// strides, broadcasting and conjugation on the aliases.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.device().type() == kHPU && dst.device().type() != kHPU) {
    end_lazy_graph();  // the host reads HPU memory: Gaudi runs (and compiles) the graph built so far first
  }
  auto target = on_backing(dst);
  target.copy_(on_backing(self), non_blocking);
  if (dst.device().type() == kHPU) {
    to_internal_dtype(dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Tensor& set_empty(at::Tensor& self) {
  const auto dtype = self.dtype();
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocator(), /*resizable=*/true);
  at::native::set_storage_cpu_(self, storage, 0, {0}, {});
  TORCH_INTERNAL_ASSERT(dtype == self.dtype());
  return self;
}

// torch asks the device which fused attention kernel F.scaled_dot_product_attention should use. The HPU has none of
// the CPU's (its flash kernel for the CPU is not an HPU kernel), so the answer is torch's device-generic math path, as
// for any device without fused attention kernels: it traces under torch.compile and runs on any backing device.
int64_t fused_sdp_choice(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                         double, bool, std::optional<double>, bool) {
  return 0;  // sdp::SDPBackend::math
}

void record_stream(at::Tensor& /*self*/, c10::Stream /*stream*/) {
  // Memory is freed when its last tensor dies; no stream can still be using it, since kernels run when issued.
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, HPU, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", at::native::resize_);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("set_.source_Storage", at::native::set_);
  m.impl("set_.source_Storage_storage_offset", at::native::set_storage_cpu_);
  m.impl("set_.source_Tensor", at::native::set_tensor_);
  m.impl("set_", set_empty);
  m.impl("is_set_to", at::native::is_set_to);
  m.impl("record_stream", record_stream);
  m.impl("_fused_sdp_choice", fused_sdp_choice);
}

// torch copies to and from a device it does not know (HPU among them) through `_copy_from`. A conjugate or negative
// view reaching it would go to torch's math-bit fallback, which resolves the bit with a clone, which copies through
// `_copy_from` again, without end. The HPU's `_copy_from` runs the backing device's copy, which applies both bits
// itself, so the bits let it through instead.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace lightning_accel::hpu
