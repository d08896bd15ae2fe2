#include "harness/campaign/scenario_catalog.h"

#include <fnmatch.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "harness/campaign/campaign.h"
#include "harness/campaign/fault_space.h"
#include "harness/detail/sys.h"
#include "harness/run/process.h"

namespace faultline::harness {

std::filesystem::path scenario_binary() {
  if (const char* p = std::getenv("FAULTLINE_SCENARIOS"); p && *p) return p;
  return detail::self_dir() / "faultline-scenarios";
}

core::result<std::vector<scenario_info>> parse_catalog(std::string_view json_text) {
  std::vector<scenario_info> out;
  try {
    auto j = nlohmann::json::parse(json_text);
    if (!j.is_array()) return core::status(core::errc::corrupt, "scenario list is not a JSON array");
    for (const auto& s : j) {
      scenario_info info;
      info.name = s.at("name").get<std::string>();
      if (info.name.empty()) return core::status(core::errc::corrupt, "a scenario has an empty name");
      info.description = s.value("description", std::string());
      auto timeout_ms = s.value("timeout_ms", std::int64_t{catalog_fallback_timeout.count()});
      info.timeout = timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms) : catalog_fallback_timeout;
      const auto slots = s.value("slots", std::int64_t{1});
      if (slots < 1 || slots > static_cast<std::int64_t>(max_jobs))
        return core::status(core::errc::corrupt, info.name + ": slots " + std::to_string(slots) + " is not in 1.." +
                                                     std::to_string(max_jobs));
      info.slots = static_cast<unsigned>(slots);
      const auto cpu = s.value("cpu_percent", std::int64_t{0});
      if (cpu < 0 || cpu > static_cast<std::int64_t>(max_jobs) * 100)
        return core::status(core::errc::corrupt, info.name + ": cpu_percent " + std::to_string(cpu) + " is not in 0.." +
                                                     std::to_string(max_jobs * 100));
      info.cpu_percent = static_cast<unsigned>(cpu);
      info.slots_are_devices = s.value("device", std::string("cuda")) != "sim";
      for (const auto& b : s.value("bug_points", nlohmann::json::array())) {
        bug_point bp{b.at("point").get<std::string>(), b.at("faults").get<std::string>(), b.value("detect_rate", 1.0)};
        if (!(bp.detect_rate >= 0.0 && bp.detect_rate <= 1.0))
          return core::status(core::errc::corrupt, info.name + ": detect_rate of " + bp.point + " is not in [0, 1]");
        info.bug_points.push_back(std::move(bp));
      }
      for (const auto& f : s.value("fault_space", nlohmann::json::array())) info.fault_space.push_back(f.get<std::string>());
      if (auto st = check_fault_space(info.fault_space); !st) return core::status(core::errc::corrupt, info.name + ": " + st.message());
      out.push_back(std::move(info));
    }
  } catch (const nlohmann::json::exception& e) {
    return core::status(core::errc::corrupt, std::string("scenario list is not the expected JSON: ") + e.what());
  }
  return out;
}

core::result<std::vector<scenario_info>> load_catalog(const std::filesystem::path& binary) {
  if (::access(binary.c_str(), X_OK) != 0)
    return core::status(core::errc::not_found,
                        "scenario binary " + binary.string() + " not found (build faultline-scenarios, or set FAULTLINE_SCENARIOS)");
  auto r = run_tool({binary.string(), "list", "--json"}, std::chrono::seconds(60), current_environment(), true);
  if (!r) return r.error();
  if (r->timed_out) return core::status(core::errc::timeout, binary.string() + " list --json did not finish in 60s");
  if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0)
    return core::status(core::errc::io_error, binary.string() + " list --json failed: " + r->errors + r->output);
  return parse_catalog(r->output);
}

core::result<std::vector<scenario_info>> select(const std::vector<scenario_info>& catalog,
                                                const std::vector<std::string>& patterns) {
  std::vector<bool> chosen(catalog.size(), false);
  for (const auto& given : patterns) {
    // A family named alone ("registry" or "registry/") means every scenario of it.
    std::string p = given;
    if (!p.empty() && p.find_first_of("*?[") == std::string::npos) {
      const std::string family = p.back() == '/' ? p : p + "/";
      const bool is_family = std::any_of(catalog.begin(), catalog.end(), [&](const scenario_info& s) {
        return s.name != p && s.name.rfind(family, 0) == 0;
      });
      if (is_family) p = family + "*";
    }
    bool any = false;
    for (std::size_t i = 0; i < catalog.size(); ++i) {
      if (catalog[i].name == p || ::fnmatch(p.c_str(), catalog[i].name.c_str(), 0) == 0) {
        chosen[i] = true;
        any = true;
      }
    }
    if (!any) {
      std::string names;
      for (const auto& s : catalog) names += (names.empty() ? "" : ", ") + s.name;
      return core::status(core::errc::not_found, "no scenario matches '" + given + "' (known: " + names + ")");
    }
  }
  std::vector<scenario_info> out;
  for (std::size_t i = 0; i < catalog.size(); ++i)
    if (chosen[i]) out.push_back(catalog[i]);
  return out;
}

nlohmann::json to_json(const std::vector<scenario_info>& catalog) {
  auto arr = nlohmann::json::array();
  for (const auto& s : catalog) {
    auto bps = nlohmann::json::array();
    for (const auto& b : s.bug_points) bps.push_back({{"point", b.point}, {"faults", b.faults}, {"detect_rate", b.detect_rate}});
    arr.push_back({{"name", s.name}, {"description", s.description}, {"timeout_ms", s.timeout.count()}, {"slots", s.slots}, {"cpu_percent", s.cpu_percent}, {"device", s.slots_are_devices ? "cuda" : "sim"}, {"bug_points", bps},
                   {"fault_space", s.fault_space}});
  }
  return arr;
}

}  // namespace faultline::harness
