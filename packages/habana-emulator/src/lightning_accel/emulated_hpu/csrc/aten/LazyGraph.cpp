// Lazy mode's graphs. On Gaudi in lazy mode the operators issued between two step marks build one graph, which the
// bridge compiles when the step is marked, or earlier when the host reads a result, unless its recipe cache holds the
// same graph already. The device keeps the identity of the graph being built (each operator, the shapes and dtypes
// of its tensors and its integer arguments, in order) and hands it to a listener when the graph ends; the emulated
// SDK keeps the cache.
#include "../HPUDevice.h"

#include <c10/util/hash.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

namespace lightning_accel::hpu {
namespace {

constexpr uint64_t kEmpty = 0x9e3779b97f4a7c15ULL;

std::atomic<bool> recording{false};
std::mutex mutex;
uint64_t identity = kEmpty;
int64_t operators = 0;
std::shared_ptr<const LazyGraphHandler> handler;

uint64_t mix(uint64_t seed, uint64_t value) { return c10::hash_combine(seed, value); }

uint64_t mix_tensor(uint64_t seed, const at::Tensor& tensor) {
  if (!tensor.defined()) {
    return mix(seed, 1);
  }
  seed = mix(seed, static_cast<uint64_t>(tensor.scalar_type()));
  seed = mix(seed, static_cast<uint64_t>(tensor.dim()));
  for (const auto size : tensor.sizes()) {
    seed = mix(seed, static_cast<uint64_t>(size));
  }
  return seed;
}

uint64_t mix_argument(uint64_t seed, const c10::IValue& value) {
  if (value.isTensor()) {
    return mix_tensor(seed, value.toTensor());
  }
  // Integers, flags and names shape the graph (a reduction's dimensions, an expand's sizes, a mode); floating-point
  // values are data, which the bridge feeds to a graph as inputs (Scalars become tensors, scripts/hpu_op.yaml).
  if (value.isInt()) {
    return mix(seed, static_cast<uint64_t>(value.toInt()));
  }
  if (value.isBool()) {
    return mix(seed, value.toBool() ? 3 : 2);
  }
  if (value.isString()) {
    return mix(seed, std::hash<std::string_view>{}(value.toStringView()));
  }
  if (value.isIntList()) {
    for (const auto element : value.toIntList()) {
      seed = mix(seed, static_cast<uint64_t>(element));
    }
    return seed;
  }
  if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList()) {
      seed = mix_tensor(seed, tensor);
    }
    return seed;
  }
  if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) {
        seed = mix_tensor(seed, element.toTensor());
      } else if (element.isNone()) {
        seed = mix(seed, 1);
      }
    }
  }
  return seed;
}

}  // namespace

void record_lazy_operator(const void* op, c10::ArrayRef<c10::IValue> arguments) {
  if (!recording.load(std::memory_order_relaxed)) {
    return;
  }
  // The key is the structure: operators, tensor shapes and dtypes, integer arguments; what makes a graph new in the
  // usual case (a batch of another size, another branch). The bridge's own key holds more (layouts, permutations).
  uint64_t step = mix(kEmpty, reinterpret_cast<uintptr_t>(op));
  for (const auto& argument : arguments) {
    step = mix_argument(step, argument);
  }
  std::lock_guard<std::mutex> lock(mutex);
  identity = mix(identity, step);
  ++operators;
}

void end_lazy_graph() {
  std::shared_ptr<const LazyGraphHandler> listener;
  uint64_t ended = kEmpty;
  int64_t count = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    std::swap(ended, identity);
    std::swap(count, operators);
    listener = handler;
  }
  if (count > 0 && listener != nullptr) {
    (*listener)(ended, count);
  }
}

void discard_lazy_graph() {
  std::lock_guard<std::mutex> lock(mutex);
  identity = kEmpty;
  operators = 0;
}

void set_lazy_graph_listener(LazyGraphHandler listener) {
  std::shared_ptr<const LazyGraphHandler> replaced;  // released after the lock, by the caller (holding the GIL)
  std::lock_guard<std::mutex> lock(mutex);
  replaced = std::move(handler);
  if (listener) {
    handler = std::make_shared<const LazyGraphHandler>(std::move(listener));
  }
  identity = kEmpty;
  operators = 0;
  recording.store(handler != nullptr, std::memory_order_relaxed);
}

}  // namespace lightning_accel::hpu
