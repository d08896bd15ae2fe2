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

std::vector<harness::run_record> command_runs(const std::vector<std::string>& argv, std::uint64_t count, std::uint64_t failures,
                                              harness::outcome result, const std::string& signature, std::uint64_t first_run,
                                              const std::string& faults) {
  const std::string name = fs::path(argv.at(0)).filename().string();
  auto out = runs(name, count, failures, result, signature, first_run, 1, faults);
  for (auto& r : out) r.command = argv;
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

std::vector<fs::path> campaign_set(const fs::path& dir, std::uint64_t runs, std::uint64_t campaigns) {
  using harness::outcome;
  std::uint64_t state = 7;  // splitmix64: the same set on every machine
  auto draw = [&state] {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const std::int64_t start_ms = detail::parse_iso_utc_ms("2026-11-18T11:00:00.000Z");
  std::vector<fs::path> dirs;
  for (std::uint64_t c = 0; c < campaigns; ++c) {
    std::vector<harness::run_record> recs;
    const std::uint64_t count = runs / campaigns + (c < runs % campaigns ? 1 : 0);
    for (std::uint64_t k = 0; k < count; ++k) {
      const std::uint64_t v = k % 20;
      const bool detection = v % 5 == 4;
      std::string name = "exit/scenario-" + std::to_string(100 + v).substr(1);
      if (detection) name += "@bug/alloc/no-exit-guard";
      const std::uint64_t roll = draw() % 1000;
      harness::run_record r = record(name, k);
      if (detection && roll < 900) {
        r = record(name, k, outcome::fail, "no-device-call-after-teardown", harness::phase::exit);
      } else if (!detection && roll < 60) {
        std::ostringstream at;
        at << std::hex << (0x7f3a00001000ull + draw() % 0x100000 * 16);
        r = record(name, k, outcome::crash, "SIGSEGV: pool::~pool+0x" + at.str() + " | exit_handler | main", harness::phase::exit);
        r.signal = 11;
        r.exit_code.reset();
        r.frames = {"pool::~pool()+0x" + at.str() + "  (libpool.so)", "exit_handler  (prog)", "__run_exit_handlers  (libc.so.6)",
                    "exit  (libc.so.6)", "main  (prog)"};
      } else if (!detection && roll < 80) {
        r = record(name, k, outcome::hang, "hang: futex_wait | lock_shrreg | main", harness::phase::exit);
        r.frames = {"futex_wait  (libc.so.6)", "lock_shrreg  (libshr.so)", "main  (prog)"};
      }
      // Seeds (and so run ids) of their own per campaign, as a campaign's --seed gives.
      r.seed = 1000 + c * 100000 + k;
      r.run_id = r.run_id.substr(0, r.run_id.rfind(".s")) + ".s" + std::to_string(r.seed);
      if (!r.log.empty()) r.log = "logs/" + r.run_id + ".log";
      if (!r.frames.empty()) r.stacks = "runs/" + r.run_id + (r.result == outcome::crash ? "/crash-stacks.txt" : "/hang-stacks.txt");
      r.faults = detection ? "bug/alloc/no-exit-guard=print" : "";
      r.injected = detection;
      r.duration_ms = 10 + static_cast<std::int64_t>(draw() % 40) * static_cast<std::int64_t>(1 + draw() % 8);
      r.timestamp = detail::iso_utc_ms(start_ms + static_cast<std::int64_t>(c) * 3'600'000 + static_cast<std::int64_t>(k) * 2300);
      recs.push_back(std::move(r));
    }
    dirs.push_back(dir / ("campaign" + std::to_string(c)));
    write_results(dirs.back(), recs);
  }
  return dirs;
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

std::vector<harness::run_record> distributed_hang(const std::string& name, std::uint64_t count) {
  auto out = runs(name, count, 1, harness::outcome::hang,
                  "hang: rank 1 outside ncclAllReduce #3 (stopped by nccl/ncclAllReduce), rank 0 waiting in it");
  harness::nccl_rank_record waiting;
  waiting.rank = 0;
  waiting.nranks = 2;
  waiting.pid = 4100;
  waiting.state = harness::rank_state::in_collective;
  waiting.collectives = 3;
  waiting.last_collective = waiting.in_call = "ncclAllReduce";
  harness::nccl_rank_record stopped = waiting;
  stopped.rank = 1;
  stopped.pid = 4101;
  stopped.state = harness::rank_state::outside;
  stopped.collectives = 2;
  stopped.in_call.clear();
  stopped.fault = "stopped";
  stopped.fault_api = "ncclAllReduce";
  stopped.fault_call = 3;
  stopped.signal = 19;  // SIGSTOP
  out[0].ranks = {waiting, stopped};
  out[0].stacks = "runs/" + out[0].run_id + "/stacks.txt";
  return out;
}

}  // namespace faultline::reports::testing
