// The emulated Gaudi device: c10's built-in DeviceType::HPU and DispatchKey::HPU, backed by host memory.
//
// runtime/  allocator with exact accounting, device guard with the SDK's index rule, hooks, generator, pinned memory
// aten/     native factories, views, copies and resizes; a boxed fallback that runs every other ATen operator with the
//           backing device's own kernel on zero-copy aliases of the same memory; lazy mode's graph identity
// amp/      the SDK's autocast kernels on AutocastHPU
// distributed/  the HPU kernels of c10d's collective operators (gloo on aliases) and the works they return
// module.cpp  the small Python surface the emulator's habana_frameworks modules sit on
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace c10d {
class Work;
}  // namespace c10d

namespace lightning_accel::hpu {

constexpr c10::DeviceType kHPU = c10::DeviceType::HPU;

// --- runtime/Allocator.cpp -------------------------------------------------------------------------------------
// The allocator registered for DeviceType::HPU. Every byte that enters the device passes through here (native
// allocations and adopted kernel outputs alike), so the counters are exact.
c10::Allocator* allocator();

struct MemoryStats {
  int64_t in_use = 0;          // bytes held by live HPU storages
  int64_t peak = 0;            // highest in_use since the last reset
  int64_t num_allocs = 0;      // storages that entered the device
  int64_t num_frees = 0;       // storages that left it
  int64_t active_allocs = 0;   // live storages
  int64_t max_alloc_size = 0;  // largest single storage
  int64_t limit = 0;           // bytes the device may hold; 0 means no limit
  int64_t bytes_allocated = 0;  // bytes of every storage that entered the device
  int64_t bytes_freed = 0;      // bytes of every storage that left it
  int64_t num_ooms = 0;         // allocations refused because the device was full
};
MemoryStats memory_stats();
void reset_peak_memory_stats();
void set_memory_limit(int64_t bytes);

// A DataPtr on hpu:0 that owns `backing` (memory of the backing device) and counts `nbytes` while it lives.
c10::DataPtr wrap_backing(c10::DataPtr backing, size_t nbytes);

// Pinned host memory (tensor.pin_memory("hpu")): torch's host allocator of DeviceType::HPU (at::getHostAllocator),
// host memory the hooks recognise as pinned.
c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* ptr);

// --- runtime/Guard.cpp -----------------------------------------------------------------------------------------
// As the SDK's guard (HPUGuardImpl.h): one device per process, index 0; any other index is refused with its text.
void check_index(c10::DeviceIndex index);

// --- runtime/Generator.cpp -------------------------------------------------------------------------------------
// The HPU's own generator (not the host's), as the SDK's htcore._get_default_generator().
const at::Generator& default_generator();
at::Generator new_generator(uint64_t seed);
// The backing device's generator that draws for an HPU generator (kernels of the backing device need their own type).
at::Generator backing_generator(const at::Generator& hpu_generator);

// --- aten/Alias.cpp --------------------------------------------------------------------------------------------
// A tensor of the backing device that views exactly the memory, sizes, strides and offset of an HPU tensor.
at::Tensor backing_alias(const at::Tensor& hpu_tensor, bool resizable);
// An HPU tensor that owns (shares) the storage of a fresh tensor of the backing device, without a copy.
at::Tensor adopt(const at::Tensor& backing_tensor);
// An HPU view over `base`'s storage with the geometry of `backing_view` (a view of base's alias).
at::Tensor hpu_view_like(const at::Tensor& base, const at::Tensor& backing_view);
// A new HPU tensor (made in C++: no Python object) over the HPU memory that `tensor` views with the same geometry,
// when `tensor` is an alias made by backing_alias or a view of one; an undefined tensor otherwise (or once released).
at::Tensor hpu_tensor_viewed_by(const at::Tensor& tensor);
// The alias (and its views) lets go of the HPU memory it holds: a host library is done with it (a completed
// collective), so the memory goes when the HPU tensor does, not when the library drops the alias. Not read after.
void release_alias(const at::Tensor& alias);

// --- aten/InternalDtypes.cpp -----------------------------------------------------------------------------------
// float64 values with float32 precision, int64 values wrapping at 32 bits, when the SDK's mode says so.
void set_internal_dtypes(bool float64_as_float32, bool int64_as_int32);
bool narrows(c10::ScalarType dtype);
void to_internal_dtype(const at::Tensor& hpu_tensor);

// --- aten/Fallback.cpp -----------------------------------------------------------------------------------------
// Sends the operators that have both a CPU kernel and a generic one to the CPU kernel (called once, at load).
void route_to_backing_kernels();

// Told the name of each operator the real device would run through its CPU fallback ("aten::bincount"), before it
// runs; a message it returns refuses the operator with a RuntimeError of that text.
using FallbackHandler = std::function<std::optional<std::string>(const std::string& operator_name)>;
// Which operators ("aten::add.Tensor") the real device has kernels of its own for, and who hears of the others: every
// operator outside that list that reaches the boxed fallback without a generic kernel to decompose it. An empty
// handler stops the reports.
void set_fallback_listener(std::unordered_set<std::string> operators_with_kernels, FallbackHandler handler);

// --- aten/LazyGraph.cpp ---------------------------------------------------------------------------------------
// Lazy mode's graphs: the operators issued since the graph began, as one 64-bit identity (each operator, the shapes
// and dtypes of its tensors and its integer arguments, in order), handed to the listener with the operator count
// when the graph ends.
using LazyGraphHandler = std::function<void(uint64_t identity, int64_t operators)>;
// Adds one operator to the graph being built (nothing while no listener is set, as in eager mode).
void record_lazy_operator(const void* op, c10::ArrayRef<c10::IValue> arguments);
// The graph ends: a step mark, or the host reading a result. An empty graph is not reported.
void end_lazy_graph();
// Forgets the graph being built (an HPU graph capture compiles its own).
void discard_lazy_graph();
// Starts recording, reporting each graph to `listener`; an empty listener stops it.
void set_lazy_graph_listener(LazyGraphHandler listener);

// --- aten/Sparse.cpp -------------------------------------------------------------------------------------------
// Raises NotImplementedError: `op_name` would make or take a sparse HPU tensor, and the device has dense kernels only.
[[noreturn]] void refuse_sparse(const std::string& op_name);
// A result of layout ``layout`` (not strided) for the HPU: the sparse refusal, or MKL-DNN's, a CPU-only layout.
[[noreturn]] void refuse_layout(const std::string& op_name, c10::Layout layout);

// --- distributed/HostCollectives.cpp ---------------------------------------------------------------------------
// Registers the HPU kernel of every c10d operator that has a CPU kernel (called once, at load): gloo on aliases, with
// the private host group of the "hccl" backend the group holds for "hpu".
void register_collective_kernels();

// --- distributed/DeviceWork.cpp -------------------------------------------------------------------------------
// The work an HPU collective returns for gloo's `host_work` on `aliases`: it waits as gloo's does (raising gloo's
// error) and its future completes with HPU tensors over the same memory; once it has, the aliases let go of the HPU
// memory. A work without a future (gloo's send/recv) is returned as it is (its aliases keep the memory).
c10::intrusive_ptr<c10d::Work> device_work(const c10::intrusive_ptr<c10d::Work>& host_work,
                                           std::vector<at::Tensor> aliases);

// --- amp/Autocast.cpp ------------------------------------------------------------------------------------------
// The bridge's cast policies (autocast_helpers.h Hpu_CastPolicy): all floating HPU inputs to the autocast dtype, to
// float32, to the widest among them, or only the first input to the autocast dtype.
enum class CastPolicy : uint8_t { lower_precision_fp, fp32, promote, lower_first_arg };
// Registers on AutocastHPU the kernel of its policy for each operator overload ("add.Tensor", "linear"), and a
// fallthrough for every other operator. Once per process (the SDK's load); a second call is an error.
void register_autocast(const std::vector<std::pair<std::string, CastPolicy>>& operators);

}  // namespace lightning_accel::hpu
