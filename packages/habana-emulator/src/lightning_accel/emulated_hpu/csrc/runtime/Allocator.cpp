// Device memory of the emulated HPU: host memory from the backing allocator, counted exactly.
#include "../HPUDevice.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <mutex>
#include <unordered_set>

namespace lightning_accel::hpu {
namespace {

std::mutex stats_mutex;
MemoryStats stats;

// What an HPU DataPtr owns: the backing memory and the size it was counted with.
struct Block {
  c10::DataPtr backing;
  size_t nbytes;
};

// The rank the SDK's messages name: RANK from the environment, read once (Logger::get_rank in the bridge's
// habana_helpers/logging.cpp); 0 without it.
uint64_t rank() {
  static const uint64_t value = [] {
    const char* text = std::getenv("RANK");
    if (text == nullptr) {
      return uint64_t{0};
    }
    try {
      return static_cast<uint64_t>(std::stoull(text));
    } catch (const std::exception&) {
      return uint64_t{0};  // the bridge's stoul would throw here; a bad RANK is not this allocation's failure
    }
  }();
  return value;
}

void count_in(size_t nbytes) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  const auto n = static_cast<int64_t>(nbytes);
  if (stats.limit > 0 && stats.in_use + n > stats.limit) {
    // A full card fails as the SDK's does (gaudi-pytorch-bridge bcc5172, device_memory.cpp, device_memory::pointer:
    // PT_DEVMEM_FATAL, a c10::Error, so Python sees a RuntimeError, not torch.OutOfMemoryError), with its text:
    // "[Rank:<RANK>] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::<bytes> (<MiB>)MB".
    TORCH_CHECK(false, "[Rank:", rank(), "] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::", nbytes,
                " (", static_cast<double>(nbytes) / (1024 * 1024), ")MB");
  }
  stats.in_use += n;
  stats.peak = std::max(stats.peak, stats.in_use);
  stats.num_allocs += 1;
  stats.active_allocs += 1;
  stats.max_alloc_size = std::max(stats.max_alloc_size, n);
}

void release(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.in_use -= static_cast<int64_t>(block->nbytes);
    stats.num_frees += 1;
    stats.active_allocs -= 1;
  }
  delete block;  // frees the backing memory through its own deleter
}

struct HPUAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return wrap_backing(c10::GetCPUAllocator()->allocate(nbytes), nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

HPUAllocator hpu_allocator;

// Pinned host memory: plain host memory, remembered so that is_pinned() answers as on the SDK.
std::mutex pinned_mutex;
std::unordered_set<const void*> pinned;

void pinned_free(void* ctx) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned.erase(ctx);
  }
  c10::free_cpu(ctx);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = c10::alloc_cpu(nbytes);
    {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned.insert(ptr);
    }
    return {ptr, ptr, &pinned_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

PinnedAllocator host_pinned_allocator;

}  // namespace

c10::DataPtr wrap_backing(c10::DataPtr backing, size_t nbytes) {
  count_in(nbytes);
  void* data = backing.get();
  auto* block = new Block{std::move(backing), nbytes};
  return {data, block, &release, c10::Device(kHPU, 0)};
}

c10::Allocator* allocator() { return &hpu_allocator; }

MemoryStats memory_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  return stats;
}

void reset_peak_memory_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.peak = stats.in_use;
}

void set_memory_limit(int64_t bytes) {
  TORCH_CHECK(bytes >= 0, "set_memory_limit(bytes=", bytes, "): the limit must be >= 0 (0 means no limit).");
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.limit = bytes;
}

c10::Allocator* pinned_allocator() { return &host_pinned_allocator; }

bool is_pinned_ptr(const void* ptr) {
  std::lock_guard<std::mutex> lock(pinned_mutex);
  return pinned.count(ptr) > 0;
}

}  // namespace lightning_accel::hpu

REGISTER_ALLOCATOR(c10::DeviceType::HPU, lightning_accel::hpu::allocator());
