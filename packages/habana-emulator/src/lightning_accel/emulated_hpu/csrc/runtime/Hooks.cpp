// torch's HPU hooks (at::HPUHooksInterface): what torch asks of "the HPU backend" outside a kernel, such as
// torch.Generator(device="hpu"), pin_memory and is_pinned.
#include "../HPUDevice.h"

#include <ATen/detail/HPUHooksInterface.h>

namespace lightning_accel::hpu {
namespace {

struct HPUHooks final : at::HPUHooksInterface {
  explicit HPUHooks(at::HPUHooksArgs) {}
  void init() const override {}
  bool hasHPU() const override { return true; }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return device_index <= 0; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex device) const override { check_index(device); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    check_index(device);
    return 0;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    check_index(device_index);
    return default_generator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    check_index(device_index);
    return new_generator(c10::default_rng_seed_val);
  }
  c10::Device getDeviceFromPtr(void* /*data*/) const override { return c10::Device(kHPU, 0); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
};

}  // namespace
}  // namespace lightning_accel::hpu

namespace at {
// torch looks the hooks up by this class name (getHPUHooks() creates "HPUHooks" from the registry).
using HPUHooks = lightning_accel::hpu::HPUHooks;
REGISTER_HPU_HOOKS(HPUHooks);
}  // namespace at
