// The zero-copy bridge between an HPU tensor and the backing device's tensors that run its kernels.
#include "../HPUDevice.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

#include <mutex>
#include <utility>

namespace lightning_accel::hpu {
namespace {

constexpr c10::DispatchKeySet kHPUKeys{c10::DispatchKey::HPU};
constexpr c10::DispatchKeySet kBackingKeys{c10::DispatchKey::CPU};

// The alias keeps the HPU storage it views alive, as any view keeps its base: a host library may still be using
// the alias after the HPU tensor is gone (an asynchronous collective whose input the caller dropped, as torch's
// bf16_compress_hook drops its compressed bucket). A collective lets go of it once done (release_alias), before gloo
// drops its aliases, so the memory goes when the caller drops its tensor.
struct ViewedStorage {
  std::mutex mutex;
  c10::Storage storage;
};

void release_viewed_storage(void* ctx) { delete static_cast<ViewedStorage*>(ctx); }

ViewedStorage* viewed_storage(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.device().type() != c10::DeviceType::CPU || !tensor.has_storage()) {
    return nullptr;
  }
  const auto& data_ptr = tensor.storage().data_ptr();
  if (data_ptr.get_deleter() != &release_viewed_storage) {
    return nullptr;
  }
  return static_cast<ViewedStorage*>(data_ptr.get_context());
}

void copy_bits(const at::Tensor& from, const at::Tensor& to) {
  if (from.is_conj()) {
    to._set_conj(true);
  }
  if (from.is_neg()) {
    to._set_neg(true);
  }
}

// Autograd's zero gradients (at::_efficientzerotensor) have no memory: their ZeroTensor key is what says so, and a
// tensor gets it only when made.
c10::DispatchKeySet hpu_keys_like(const at::Tensor& backing_tensor) {
  return backing_tensor._is_zerotensor() ? kHPUKeys.add(c10::DispatchKey::ZeroTensor) : kHPUKeys;
}

}  // namespace

at::Tensor backing_alias(const at::Tensor& hpu_tensor, bool resizable) {
  const auto& storage = hpu_tensor.storage();
  void* data = storage.unsafeGetStorageImpl()->mutable_data();
  // The alias shares the memory: it never frees it, it only holds the HPU storage. A kernel that resizes an out=
  // argument reallocates through the host allocator, which the fallback then hands back to the HPU storage.
  c10::Storage alias_storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                             c10::DataPtr(data, new ViewedStorage{{}, storage}, &release_viewed_storage,
                                          c10::Device(c10::DeviceType::CPU)),
                             resizable ? c10::GetCPUAllocator() : nullptr, resizable);
  auto alias = at::detail::make_tensor<c10::TensorImpl>(std::move(alias_storage), kBackingKeys, hpu_tensor.dtype());
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(hpu_tensor.sizes(), hpu_tensor.strides(),
                                                     hpu_tensor.storage_offset());
  copy_bits(hpu_tensor, alias);
  return alias;
}

namespace {

void release_backing_storage(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

}  // namespace

at::Tensor adopt(const at::Tensor& backing_tensor) {
  const auto& storage = backing_tensor.storage();
  const size_t nbytes = storage.nbytes();
  void* data = storage.unsafeGetStorageImpl()->mutable_data();
  // The HPU storage keeps the backing storage alive instead of copying it.
  auto* keep = new c10::Storage(storage);
  c10::DataPtr backing(data, keep, &release_backing_storage, c10::Device(c10::DeviceType::CPU));
  c10::Storage hpu_storage(c10::Storage::use_byte_size_t(), nbytes, wrap_backing(std::move(backing), nbytes),
                           allocator(), /*resizable=*/true);
  auto result = at::detail::make_tensor<c10::TensorImpl>(std::move(hpu_storage), hpu_keys_like(backing_tensor),
                                                          backing_tensor.dtype());
  result.unsafeGetTensorImpl()->set_sizes_and_strides(backing_tensor.sizes(), backing_tensor.strides(),
                                                      backing_tensor.storage_offset());
  copy_bits(backing_tensor, result);
  return result;
}

namespace {

at::Tensor hpu_view_like_storage(const c10::Storage& storage, const at::Tensor& backing_view) {
  // The storage constructor, not TensorImpl::VIEW's: that one keeps the key set as given, without the autograd keys.
  auto result = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage), hpu_keys_like(backing_view),
                                                          backing_view.dtype());
  result.unsafeGetTensorImpl()->set_sizes_and_strides(backing_view.sizes(), backing_view.strides(),
                                                      backing_view.storage_offset());
  copy_bits(backing_view, result);
  return result;
}

}  // namespace

at::Tensor hpu_view_like(const at::Tensor& base, const at::Tensor& backing_view) {
  return hpu_view_like_storage(base.storage(), backing_view);
}

at::Tensor hpu_tensor_viewed_by(const at::Tensor& tensor) {
  auto* viewed = viewed_storage(tensor);
  if (viewed == nullptr) {
    return {};
  }
  c10::Storage storage;
  {
    std::lock_guard<std::mutex> lock(viewed->mutex);
    storage = viewed->storage;
  }
  return storage ? hpu_view_like_storage(storage, tensor) : at::Tensor();
}

void release_alias(const at::Tensor& alias) {
  auto* viewed = viewed_storage(alias);
  if (viewed == nullptr) {
    return;
  }
  c10::Storage released;  // dropped after the lock
  std::lock_guard<std::mutex> lock(viewed->mutex);
  released = std::move(viewed->storage);
}

}  // namespace lightning_accel::hpu
