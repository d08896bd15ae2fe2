#include "reports/tests/fixtures.h"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "reports/detail/text.h"

namespace faultline::reports::testing {

namespace fs = std::filesystem;

temp_dir::temp_dir() {
  static std::atomic<int> counter{0};
  path_ = fs::temp_directory_path() /
          ("faultline-reports-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

temp_dir::~temp_dir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

harness::run_record record(const std::string& name, std::uint64_t run, harness::outcome result, const std::string& signature,
                           harness::phase when) {
  harness::run_record r;
  r.name = name;
  r.run = run;
  r.seed = 1000 + run;
  r.run_id = name + ".s" + std::to_string(r.seed);
  for (auto& c : r.run_id)
    if (c == '/') c = '-';
  r.result = result;
  r.when = result == harness::outcome::pass ? harness::phase::none : when;
  r.exit_code = result == harness::outcome::pass ? 0 : 1;
  r.duration_ms = 20 + static_cast<std::int64_t>(run % 7);
  r.signature = result == harness::outcome::pass ? "" : signature;
  r.log = result == harness::outcome::pass ? "" : "logs/" + r.run_id + ".log";
  r.timestamp = detail::iso_utc_ms(detail::parse_iso_utc_ms("2026-01-01T00:00:00.000Z") + static_cast<std::int64_t>(run) * 1000);
  r.command = {"/build/bin/faultline-scenarios", "run", name.substr(0, name.find('@'))};
  return r;
}

std::vector<harness::run_record> runs(const std::string& name, std::uint64_t count, std::uint64_t failures, harness::outcome result,
                                      const std::string& signature, std::uint64_t first_run, std::uint64_t stride,
                                      const std::string& faults) {
  std::vector<harness::run_record> out;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto r = i < failures ? record(name, first_run + i * stride, result, signature, harness::phase::exit)
                          : record(name, first_run + i * stride);
    r.faults = faults;
    r.injected = !faults.empty();
    out.push_back(std::move(r));
  }
  return out;
}

fs::path write_results(const fs::path& dir, const std::vector<harness::run_record>& records, const std::string& tail) {
  fs::create_directories(dir);
  const fs::path file = dir / "results.jsonl";
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  for (const auto& r : records) out << nlohmann::json(r).dump() << "\n";
  out << tail;
  if (!out) throw std::runtime_error("cannot write " + file.string());
  return file;
}

void write_manifest(const fs::path& dir, const std::string& shard, std::uint64_t seed, const std::vector<std::string>& variants) {
  fs::create_directories(dir);
  nlohmann::json vs = nlohmann::json::array();
  for (const auto& v : variants) vs.push_back({{"name", v}, {"faults", ""}});
  nlohmann::json j = {{"format", 1}, {"repeat", 100}, {"seed", seed}, {"shard", shard}, {"variants", vs}};
  std::ofstream(dir / "campaign.json") << j.dump(2) << "\n";
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<harness::run_record> operator+(std::vector<harness::run_record> a, const std::vector<harness::run_record>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace faultline::reports::testing
