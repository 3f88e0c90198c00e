// Device memory of the emulated HPU: host memory from the backing allocator, counted exactly.
#include "../HPUDevice.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <mutex>
#include <unordered_map>

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
    stats.num_ooms += 1;
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
  stats.bytes_allocated += n;
  stats.max_alloc_size = std::max(stats.max_alloc_size, n);
}

void release(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.in_use -= static_cast<int64_t>(block->nbytes);
    stats.num_frees += 1;
    stats.active_allocs -= 1;
    stats.bytes_freed += static_cast<int64_t>(block->nbytes);
  }
  delete block;  // frees the backing memory through its own deleter
}

// The device's memory as the SDK reports it: the limit, or the host's physical memory when there is none (as
// hpu.memory_stats()["Limit"]).
int64_t device_memory(int64_t limit) {
  if (limit > 0) {
    return limit;
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
}

void fill(c10::CachingAllocator::StatArray& array, int64_t current, int64_t peak, int64_t allocated, int64_t freed) {
  // No pools: every storage is one allocation of its own, so the aggregate is the only kind.
  auto& stat = array[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  stat.current = current;
  stat.peak = peak;
  stat.allocated = allocated;
  stat.freed = freed;
}

// A c10 DeviceAllocator, so that torch.accelerator.memory_* (and everything torch asks of "the device allocator")
// read the same counters as the SDK's hpu.memory_stats(). Each storage is its own block, nothing is cached, and kernels
// run when issued, so there is no cache to empty and no stream to wait for before a block is reused.
struct HPUAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return wrap_backing(c10::GetCPUAllocator()->allocate(nbytes), nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_index(device);
    const MemoryStats now = memory_stats();
    c10::CachingDeviceAllocator::DeviceStats result;
    fill(result.allocation, now.active_allocs, now.active_allocs, now.num_allocs, now.num_frees);
    fill(result.segment, now.active_allocs, now.active_allocs, now.num_allocs, now.num_frees);
    fill(result.active, now.active_allocs, now.active_allocs, now.num_allocs, now.num_frees);
    fill(result.allocated_bytes, now.in_use, now.peak, now.bytes_allocated, now.bytes_freed);
    fill(result.active_bytes, now.in_use, now.peak, now.bytes_allocated, now.bytes_freed);
    fill(result.requested_bytes, now.in_use, now.peak, now.bytes_allocated, now.bytes_freed);
    // The SDK's allocator takes the whole card when it starts: hpu.memory_reserved() is the Limit, and so is this.
    const int64_t reserved = device_memory(now.limit);
    fill(result.reserved_bytes, reserved, reserved, reserved, 0);
    result.num_ooms = now.num_ooms;
    result.num_device_alloc = now.num_allocs;
    result.num_device_free = now.num_frees;
    return result;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_index(device);
    // Refused as the SDK's hpu.reset_accumulated_memory_stats is on the emulator: NumAllocs and NumFrees count from
    // the start of the process, and both APIs read the same counters.
    TORCH_CHECK_NOT_IMPLEMENTED(false,
                                "reset_accumulated_memory_stats is not emulated for the HPU: the Gaudi allocator's "
                                "accumulated counters (NumAllocs and NumFrees) are counted from the start of the "
                                "process on the emulator. Read differences of memory_stats() instead.");
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_index(device);
    reset_peak_memory_stats();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_index(device);
    const MemoryStats now = memory_stats();
    const int64_t total = device_memory(now.limit);
    return {static_cast<size_t>(std::max<int64_t>(total - now.in_use, 0)), static_cast<size_t>(total)};
  }
};

HPUAllocator hpu_allocator;

// Pinned host memory: plain host memory, remembered so that is_pinned() answers as on the SDK. torch's host allocator
// of the HPU (at::getHostAllocator(kHPU), which torch.accelerator's host-memory calls reach), counted exactly; it
// caches nothing, so there is no cache to empty.
std::mutex pinned_mutex;
std::unordered_map<const void*, size_t> pinned;  // pointer -> bytes
at::HostStats pinned_stats;

void pinned_free(void* ctx) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    auto found = pinned.find(ctx);
    if (found != pinned.end()) {
      pinned_stats.active_requests.decrease(1);
      pinned_stats.active_bytes.decrease(found->second);
      pinned_stats.allocations.decrease(1);
      pinned_stats.allocated_bytes.decrease(found->second);
      pinned_stats.num_host_free += 1;
      pinned.erase(found);
    }
  }
  c10::free_cpu(ctx);
}

struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = c10::alloc_cpu(nbytes);
    {
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned.emplace(ptr, nbytes);
      pinned_stats.active_requests.increase(1);
      pinned_stats.active_bytes.increase(nbytes);
      pinned_stats.allocations.increase(1);
      pinned_stats.allocated_bytes.increase(nbytes);
      pinned_stats.num_host_alloc += 1;
    }
    return {ptr, ptr, &pinned_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  // Copies are done when issued, so a block never waits for a stream before it is freed.
  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    return pinned_stats;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    for (auto* stat : {&pinned_stats.active_requests, &pinned_stats.active_bytes, &pinned_stats.allocations,
                       &pinned_stats.allocated_bytes}) {
      stat->reset_accumulated();
    }
    pinned_stats.num_host_alloc = 0;
    pinned_stats.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    for (auto* stat : {&pinned_stats.active_requests, &pinned_stats.active_bytes, &pinned_stats.allocations,
                       &pinned_stats.allocated_bytes}) {
      stat->reset_peak();
    }
  }
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

c10::Allocator* pinned_allocator() { return at::getHostAllocator(kHPU); }

bool is_pinned_ptr(const void* ptr) {
  std::lock_guard<std::mutex> lock(pinned_mutex);
  return pinned.count(ptr) > 0;
}

}  // namespace lightning_accel::hpu

REGISTER_ALLOCATOR(c10::DeviceType::HPU, lightning_accel::hpu::allocator());
REGISTER_HOST_ALLOCATOR(c10::DeviceType::HPU, &lightning_accel::hpu::host_pinned_allocator);
