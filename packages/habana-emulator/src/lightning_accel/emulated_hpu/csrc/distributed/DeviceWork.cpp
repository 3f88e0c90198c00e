// The work an "hccl" collective returns: gloo's work on the host views, and the future that gives the HPU tensors.
//
// torch's work over a future (_create_work_from_future) returns from wait() without looking at the future's error, so
// a collective whose peer died would seem to succeed. This one fails in wait() with gloo's own error, as gloo's work
// and HCCL's do, and its future is the mapped one (what DDP's reducer and comm hooks read).
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

namespace {

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

namespace lightning_accel::hpu {

void bind_device_work(pybind11::module& m) {
  m.def(
      "device_work",
      [](c10d::Work& host, const std::shared_ptr<torch::jit::PythonFutureWrapper>& future) {
        auto work = c10::make_intrusive<DeviceWork>(
            c10::intrusive_ptr<c10d::Work>::unsafe_reclaim_from_nonowning(&host), future->fut);
        // Boxed, as the c10d operators return their works (what Work.boxed() gives).
        return torch::jit::toPyObject(c10::IValue(c10::intrusive_ptr<c10d::Work>(std::move(work))));
      },
      pybind11::arg("host_work"), pybind11::arg("future"),
      "The boxed work of an HPU collective: waits on `host_work` (gloo's, raising its error) and completes with "
      "`future` (the HPU tensors).");
}

}  // namespace lightning_accel::hpu
