// The HPU's own random generator, as the SDK keeps one (htcore._get_default_generator(); hpu/random.py's
// default_generators has exactly one). Its state is a generator of the backing device, which the backing kernels
// draw from: an HPU draw never moves the host generator, and the host never moves the HPU's.
#include "../HPUDevice.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/Exception.h>

#include <mutex>

namespace lightning_accel::hpu {
namespace {

struct HPUGeneratorImpl final : c10::GeneratorImpl {
  explicit HPUGeneratorImpl(uint64_t seed)
      : c10::GeneratorImpl(c10::Device(kHPU, 0), c10::DispatchKeySet(c10::DispatchKey::HPU)),
        backing(at::detail::createCPUGenerator(seed)) {}
  explicit HPUGeneratorImpl(at::Generator state)
      : c10::GeneratorImpl(c10::Device(kHPU, 0), c10::DispatchKeySet(c10::DispatchKey::HPU)),
        backing(std::move(state)) {}

  void set_current_seed(uint64_t seed) override { backing.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { backing.set_offset(offset); }
  uint64_t get_offset() const override { return backing.get_offset(); }
  uint64_t current_seed() const override { return backing.current_seed(); }
  uint64_t seed() override { return backing.seed(); }
  void set_state(const c10::TensorImpl& new_state) override {
    // torch hands the state in as a host byte tensor; the backing generator validates its size and contents.
    backing.set_state(at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(
        const_cast<c10::TensorImpl*>(&new_state))));
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return backing.get_state().getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return c10::DeviceType::HPU; }

  at::Generator backing;

 private:
  HPUGeneratorImpl* clone_impl() const override { return new HPUGeneratorImpl(backing.clone()); }
};

}  // namespace

const at::Generator& default_generator() {
  static at::Generator generator = at::make_generator<HPUGeneratorImpl>(c10::default_rng_seed_val);
  return generator;
}

at::Generator new_generator(uint64_t seed) { return at::make_generator<HPUGeneratorImpl>(seed); }

at::Generator backing_generator(const at::Generator& hpu_generator) {
  TORCH_CHECK(hpu_generator.device().type() == kHPU, "Expected a 'hpu' device type for generator but found '",
              hpu_generator.device().type(), "'");
  return static_cast<HPUGeneratorImpl*>(hpu_generator.unsafeGetGeneratorImpl())->backing;
}

}  // namespace lightning_accel::hpu
