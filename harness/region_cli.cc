#include "harness/region_cli.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/accounting/region.h"

namespace faultline::harness {
namespace {

namespace acc = faultline::accounting;

std::string bytes(std::uint64_t n) {
  if (n == acc::no_limit) return "none";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char text[32];
  if (u == 0) std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(n));
  else std::snprintf(text, sizeof text, "%.1f %s", v, units[u]);
  return text;
}

std::string mode_text(std::uint32_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", mode & 07777);
  return text;
}

nlohmann::json counters_json(const acc::counters& c) {
  return {{"total", c.total}, {"context", c.context}, {"module", c.module}, {"data", c.data}};
}

nlohmann::json report_json(const acc::region_report& r) {
  nlohmann::json j;
  j["path"] = r.path;
  j["file_bytes"] = r.file_bytes;
  j["owner_uid"] = r.owner_uid;
  j["abi_version"] = r.abi_version;
  j["devices"] = r.device_count;
  j["max_slots"] = r.max_slots;
  j["lock_owner_pid"] = r.lock_owner_pid;
  j["occupancy"] = r.occupancy;
  j["repairs"] = r.repairs;
  j["occupancy_violations"] = r.occupancy_violations;
  j["slots_reclaimed"] = r.slots_reclaimed;
  nlohmann::json devices = nlohmann::json::array();
  for (std::uint32_t d = 0; d < r.device_count; ++d) {
    nlohmann::json dev = {{"device", d}};
    if (d < r.limits_bytes.size()) dev["limit_bytes"] = r.limits_bytes[d] == acc::no_limit ? nlohmann::json(nullptr) : nlohmann::json(r.limits_bytes[d]);
    if (d < r.aggregate_bytes.size()) dev["aggregate_bytes"] = r.aggregate_bytes[d];
    if (d < r.live_sum.size()) dev["live_sum"] = counters_json(r.live_sum[d]);
    if (d < r.utilisation_percent.size()) dev["utilisation_percent"] = r.utilisation_percent[d];
    devices.push_back(std::move(dev));
  }
  j["device_usage"] = std::move(devices);
  nlohmann::json slots = nlohmann::json::array();
  for (const auto& s : r.slots) {
    nlohmann::json per = nlohmann::json::array();
    for (const auto& c : s.devices) per.push_back(counters_json(c));
    slots.push_back({{"index", s.index}, {"pid", s.pid}, {"start_time", s.start_time},
                     {"state", std::string(acc::to_string(s.state))}, {"mid_update", s.mid_update}, {"devices", per}});
  }
  j["slots"] = std::move(slots);
  j["healthy"] = r.healthy();
  j["problems"] = r.problems;
  return j;
}

void print_report(const acc::region_report& r, std::ostream& out) {
  out << "region " << r.path << ": " << r.device_count << (r.device_count == 1 ? " device, " : " devices, ")
      << r.max_slots << " slots, ABI " << r.abi_version << ", " << r.file_bytes << " bytes, owner uid " << r.owner_uid
      << ", mode " << mode_text(r.mode) << "\n";
  for (std::uint32_t d = 0; d < r.device_count; ++d) {
    const acc::counters live = d < r.live_sum.size() ? r.live_sum[d] : acc::counters{};
    out << "  device " << d << ": limit " << bytes(d < r.limits_bytes.size() ? r.limits_bytes[d] : acc::no_limit)
        << ", charged " << bytes(d < r.aggregate_bytes.size() ? r.aggregate_bytes[d] : 0) << ", live slots "
        << bytes(live.total) << " (context " << bytes(live.context) << ", module " << bytes(live.module) << ", data "
        << bytes(live.data) << ")";
    if (d < r.utilisation_percent.size()) out << ", utilisation " << r.utilisation_percent[d] << "%";
    out << "\n";
  }
  for (const auto& s : r.slots) {
    out << "  slot " << s.index << ": pid " << s.pid << " " << acc::to_string(s.state)
        << (s.mid_update ? " (stuck mid-update)" : "");
    for (std::size_t d = 0; d < s.devices.size(); ++d)
      if (s.devices[d].total != 0) out << ", device " << d << " " << bytes(s.devices[d].total);
    out << "\n";
  }
  out << "  lock: " << (r.lock_owner_pid == 0 ? std::string("free") : "held by pid " + std::to_string(r.lock_owner_pid))
      << "; repairs " << r.repairs << ", slots reclaimed " << r.slots_reclaimed << ", occupancy violations "
      << r.occupancy_violations << "\n";
  if (r.healthy()) {
    out << "  healthy: aggregates equal the live slots, no slot stuck mid-update, nobody inside the lock\n";
  } else {
    for (const auto& p : r.problems) out << "  problem: " << p << "\n";
  }
}

}  // namespace

int region_command(const std::string& path, bool repair, bool json, std::ostream& out, std::ostream& err) {
  nlohmann::json repaired;
  if (repair) {
    auto rep = acc::repair(path);
    if (!rep) {
      err << "faultline: error: " << rep.error().message() << "\n";
      return 2;
    }
    repaired = {{"dead_slots_reclaimed", rep->dead_slots_reclaimed},
                {"odd_slots_repaired", rep->odd_slots_repaired},
                {"lock_owner_died", rep->lock_owner_died},
                {"aggregate_corrections", rep->aggregate_corrections}};
    if (!json) {
      out << "repaired " << path << ": " << rep->dead_slots_reclaimed << " dead slots reclaimed ("
          << rep->odd_slots_repaired << " stuck mid-update)" << (rep->lock_owner_died ? ", the lock's holder had died" : "");
      for (std::size_t d = 0; d < rep->aggregate_corrections.size(); ++d)
        if (rep->aggregate_corrections[d] != 0) out << ", device " << d << " aggregate corrected by " << rep->aggregate_corrections[d] << " bytes";
      out << "\n";
    }
  }
  auto r = acc::inspect(path);
  if (!r) {
    err << "faultline: error: " << r.error().message() << "\n";
    return 2;
  }
  if (json) {
    auto j = report_json(*r);
    if (repair) j["repair"] = repaired;
    out << j.dump() << "\n";
  } else {
    print_report(*r, out);
  }
  return r->healthy() ? 0 : 1;
}

}  // namespace faultline::harness
