#include "harness/campaign/scenario_variant.h"

#include <utility>

namespace faultline::harness {

variant scenario_variant(const scenario_info& sc, std::string name, std::string faults, std::chrono::milliseconds timeout,
                         std::vector<std::string> env, const std::filesystem::path& bin) {
  variant v;
  v.name = std::move(name);
  v.kind = variant_kind::scenario;
  v.argv = {bin.string(), "run", sc.name};
  v.faults = std::move(faults);
  v.timeout = timeout;
  v.env = std::move(env);
  v.in_run_dir = true;
  v.slots = sc.slots;
  v.cpu_percent = sc.cpu_percent;
  v.slots_are_devices = sc.slots_are_devices;
  return v;
}

}  // namespace faultline::harness
