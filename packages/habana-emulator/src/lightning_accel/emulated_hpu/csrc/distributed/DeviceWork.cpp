// The work an "hccl" collective returns: gloo's work on the aliases, and a future that gives HPU tensors.
//
// torch's work over a future (_create_work_from_future) returns from wait() without looking at the future's error, so
// a collective whose peer died would seem to succeed. This one fails in wait() with gloo's own error, as gloo's work
// and HCCL's do, and its future is the mapped one (what DDP's reducer and comm hooks read).
//
// Nothing here holds or makes a Python object. gloo's worker thread completes the mapped future and later drops its
// work (and with it the aliases): a Python object released there, or a tensor whose C++ count crosses 1 <-> 2 while it
// has one (torch then increfs or decrefs its Python object), takes the GIL on that thread, which aborts the process
// ("terminate called without an active exception") once the interpreter is finalizing. So the future's value holds
// new HPU tensors over the caller's memory, made here, not the caller's tensors (whose Python objects exist).
#include "../HPUDevice.h"

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <utility>

namespace lightning_accel::hpu {
namespace {

c10::IValue on_device(const c10::IValue& value) {
  if (value.isTensor()) {
    auto hpu = hpu_tensor_viewed_by(value.toTensor());
    return hpu.defined() ? c10::IValue(std::move(hpu)) : value;
  }
  if (value.isTensorList()) {
    const auto list = value.toTensorList();
    c10::List<at::Tensor> mapped;
    mapped.reserve(list.size());
    for (const at::Tensor& tensor : list) {
      auto hpu = hpu_tensor_viewed_by(tensor);
      mapped.push_back(hpu.defined() ? std::move(hpu) : tensor);
    }
    return mapped;
  }
  if (value.isList()) {  // gloo's allgather completes with one list of outputs per input
    const auto list = value.toList();
    c10::impl::GenericList mapped(list.elementType());
    mapped.reserve(list.size());
    for (const c10::IValue& element : list) {
      mapped.push_back(on_device(element));
    }
    return mapped;
  }
  return value;
}

class DeviceWork : public c10d::Work {
 public:
  DeviceWork(c10::intrusive_ptr<c10d::Work> host, c10::intrusive_ptr<c10::ivalue::Future> future)
      : host_(std::move(host)), future_(std::move(future)) {}

  bool isCompleted() override { return future_->completed(); }

  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }

  std::exception_ptr exception() const override { return future_->exception_ptr(); }

  bool wait(std::chrono::milliseconds timeout) override {
    // gloo's wait throws its error (a peer gone, a timeout); the mapped future may still fail on its own.
    host_->wait(timeout);
    future_->waitAndThrow();
    return true;
  }

  void synchronize() override {}

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10d::Work> host_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> device_work(const c10::intrusive_ptr<c10d::Work>& host_work,
                                           std::vector<at::Tensor> aliases) {
  c10::intrusive_ptr<c10::ivalue::Future> host_future;
  try {
    host_future = host_work->getFuture();
  } catch (const c10::Error&) {
    return host_work;  // gloo's send/recv: no future to map; the result is in the caller's memory when wait() returns
  }
  if (!host_future) {
    return host_work;
  }
  auto mapped = c10::make_intrusive<c10::ivalue::Future>(host_future->elementType());
  // The callback fails the mapped future with gloo's error in C++, as HCCL's work fails: DDP's reducer (C++, on the
  // autograd thread) must see a failed future, not a completed one whose value is an exception object (what a Python
  // future's set_exception gives), which it would take for the reduced tensors and read past the end of an empty
  // tensor list: a segmentation fault before anything could say which rank died.
  host_future->addCallback(
      [mapped, aliases = std::move(aliases)](c10::ivalue::Future& done) mutable {
        // Released before gloo's work reports completion (gloo completes its future first): a waiter that returns
        // from wait() and drops the work leaves nothing of this call to gloo's thread but aliases that no longer
        // hold the HPU memory, which is freed when the caller drops its tensors.
        auto future = std::move(mapped);
        if (done.hasError()) {
          // A failed collective's aliases keep the memory until gloo drops them: nothing says its transport is done.
          future->setError(done.exception_ptr());
          return;
        }
        try {
          future->markCompleted(on_device(done.constValue()));
        } catch (...) {
          future->setErrorIfNeeded(std::current_exception());
        }
        for (const auto& alias : aliases) {
          release_alias(alias);
        }
        aliases.clear();
      },
      /*uses_future=*/true);
  return c10::make_intrusive<DeviceWork>(host_work, std::move(mapped));
}

}  // namespace lightning_accel::hpu
