// Sparse layouts on the HPU. The device has dense kernels only: an operator that would make or take a sparse HPU
// tensor (Embedding(sparse=True)'s gradient, to_sparse(), a sparse host tensor moved to the HPU) is refused here with
// what to do instead, rather than with the dispatcher's list of backends.
#include "../HPUDevice.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

namespace lightning_accel::hpu {

void refuse_sparse(const std::string& op_name) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op_name,
                              ": the emulated HPU has no sparse tensors (layouts sparse_coo, sparse_csr, sparse_csc, "
                              "sparse_bsr, sparse_bsc); it has dense kernels only. Keep sparse tensors on the host, "
                              "or use dense ones on the HPU: for example nn.Embedding(..., sparse=False), "
                              "F.embedding(..., sparse=False) or tensor.to_dense().");
}

void refuse_layout(const std::string& op_name, c10::Layout layout) {
  // Gaudi's bridge registers no MKL-DNN kernels either: oneDNN's opaque layout is the CPU's own.
  TORCH_CHECK_NOT_IMPLEMENTED(layout != c10::kMkldnn, op_name,
                              ": the emulated HPU has no MKL-DNN (oneDNN) tensors, a layout of the CPU only; it has "
                              "dense, strided tensors. Call to_mkldnn() on a host tensor (tensor.cpu().to_mkldnn()), "
                              "or keep the strided HPU tensor.");
  refuse_sparse(op_name);
}

namespace {

void refuse_sparse_operator(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  std::string name = op.schema().name();
  if (!op.schema().overload_name().empty()) {
    name += "." + op.schema().overload_name();
  }
  refuse_sparse(name);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparseHPU, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse_operator>()); }

TORCH_LIBRARY_IMPL(_, SparseCsrHPU, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse_operator>()); }

}  // namespace lightning_accel::hpu
