// The HPU device guard. The SDK drives one card per process and calls it hpu:0 (HPUGuardImpl.h in
// gaudi-pytorch-bridge 1.19): deviceCount() is 1 and any other index fails "habana active device: N != 0".
// Kernels run synchronously on the backing device, so a stream is an id and an event is already complete; they exist
// because autograd's device thread, DDP and user code record and wait on them.
#include "../HPUDevice.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <atomic>

namespace lightning_accel::hpu {

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index <= 0, "habana active device: ", static_cast<int>(index), " != 0");
}

namespace {

thread_local c10::StreamId current_stream_id = 0;
std::atomic<c10::StreamId> next_stream_id{1};

// An event records nothing to wait for; it keeps the flag it was made with, as torch's Event expects.
struct Event {
  c10::EventFlag flag;
};

struct HPUGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::HPU;

  c10::DeviceType type() const override { return c10::DeviceType::HPU; }

  c10::Device exchangeDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == c10::DeviceType::HPU);
    check_index(device.index());
    return c10::Device(kHPU, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kHPU, 0); }
  void setDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == c10::DeviceType::HPU);
    check_index(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() > 0) {
      TORCH_WARN("habana active device: ", static_cast<int>(device.index()), " != 0");
    }
  }

  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kHPU, 0), current_stream_id);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kHPU, 0));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*isHighPriority*/) const override {
    return getNewStream(device, 0);
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    check_index(device.index());
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kHPU, 0), next_stream_id.fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    const auto old = getStream(stream.device());
    current_stream_id = stream.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ", device_index,
                " does not match recording stream's device index ", stream.device_index(), ".");
    if (*event == nullptr) {
      *event = new Event{flag};
    }
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<Event*>(event);
  }
  void synchronizeEvent(void* /*event*/) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "Both events must be recorded before calculating elapsed time.");
    // Work is done when it is issued, so no device time passes between two events.
    return 0.0;
  }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {}
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/, const c10::Stream& /*stream*/) const override {}
};

}  // namespace
}  // namespace lightning_accel::hpu

C10_REGISTER_GUARD_IMPL(HPU, lightning_accel::hpu::HPUGuardImpl);
