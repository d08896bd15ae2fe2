#include "harness/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>

#include "harness/detail/sys.h"

namespace faultline::harness {

std::string_view to_string(outcome o) noexcept {
  switch (o) {
    case outcome::pass: return "pass";
    case outcome::fail: return "fail";
    case outcome::crash: return "crash";
    case outcome::hang: return "hang";
    case outcome::leak: return "leak";
    case outcome::error: return "error";
  }
  return "error";
}

std::string_view to_string(phase p) noexcept {
  switch (p) {
    case phase::run: return "run";
    case phase::exit: return "exit";
    case phase::none: break;
  }
  return "";
}

std::optional<outcome> outcome_from_string(std::string_view s) noexcept {
  for (outcome o : all_outcomes)
    if (to_string(o) == s) return o;
  return std::nullopt;
}

std::optional<phase> phase_from_string(std::string_view s) noexcept {
  if (s == "run") return phase::run;
  if (s == "exit") return phase::exit;
  if (s.empty()) return phase::none;
  return std::nullopt;
}

std::string signal_name(int sig) {
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
    return sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  }
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  return "SIG" + std::to_string(sig);
}

void to_json(nlohmann::json& j, const run_record& r) {
  using nlohmann::json;
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  j = json{
      {"run_id", r.run_id},
      {"run", r.run},
      {"name", r.name},
      {"seed", r.seed},
      {"faults", or_null(r.faults)},
      {"injected", r.injected},
      {"outcome", to_string(r.result)},
      {"phase", r.when == phase::none ? json(nullptr) : json(to_string(r.when))},
      {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
      {"signal", r.signal ? json{{"name", signal_name(*r.signal)}, {"number", *r.signal}} : json(nullptr)},
      {"duration_ms", r.duration_ms},
      {"signature", or_null(r.signature)},
      {"log", or_null(r.log)},
      {"stacks", or_null(r.stacks)},
      {"leaked_pids", r.leaked_pids},
      {"leaked_shm", r.leaked_shm},
      {"timestamp", r.timestamp},
      {"command", r.command},
  };
}

void from_json(const nlohmann::json& j, run_record& r) {
  auto str = [&](const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? std::string() : it->get<std::string>();
  };
  r.run_id = j.at("run_id").get<std::string>();
  r.run = j.value("run", std::uint64_t{0});
  r.name = j.at("name").get<std::string>();
  r.seed = j.at("seed").get<std::uint64_t>();
  r.faults = str("faults");
  r.injected = j.value("injected", !r.faults.empty());
  auto o = outcome_from_string(j.at("outcome").get<std::string>());
  if (!o) throw nlohmann::json::other_error::create(501, "unknown outcome " + j.at("outcome").dump(), &j);
  r.result = *o;
  auto p = phase_from_string(str("phase"));
  if (!p) throw nlohmann::json::other_error::create(501, "unknown phase " + j.at("phase").dump(), &j);
  r.when = *p;
  r.exit_code.reset();
  r.signal.reset();
  if (auto it = j.find("exit_code"); it != j.end() && !it->is_null()) r.exit_code = it->get<int>();
  if (auto it = j.find("signal"); it != j.end() && !it->is_null()) r.signal = it->at("number").get<int>();
  r.duration_ms = j.value("duration_ms", std::int64_t{0});
  r.signature = str("signature");
  r.log = str("log");
  r.stacks = str("stacks");
  r.leaked_pids = j.value("leaked_pids", std::vector<int>{});
  r.leaked_shm = j.value("leaked_shm", std::vector<std::string>{});
  r.timestamp = str("timestamp");
  r.command = j.value("command", std::vector<std::string>{});
}

results_writer::~results_writer() {
  if (fd_ >= 0) ::close(fd_);
}

core::status results_writer::open(const std::filesystem::path& path) {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return detail::sys_error(errno, "open " + path.string());
  return {};
}

core::status results_writer::append(const run_record& r) {
  std::string line = nlohmann::json(r).dump() + "\n";
  std::lock_guard lock(mu_);
  if (fd_ < 0) return core::status(core::errc::invalid_argument, "results file is not open");
  return detail::write_all(fd_, line, "write results");
}

core::result<results_file> parse_results(std::string_view text) {
  results_file out;
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t nl = text.find('\n', pos);
    const bool last = nl == std::string_view::npos;
    std::string_view line = text.substr(pos, last ? std::string_view::npos : nl - pos);
    pos = last ? text.size() : nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      out.records.push_back(nlohmann::json::parse(line).get<run_record>());
    } catch (const nlohmann::json::exception& e) {
      // A writer killed mid-line leaves an unterminated tail: tolerated. Anything else means
      // the file is not what we wrote.
      if (last) {
        out.truncated_tail = true;
        break;
      }
      return core::status(core::errc::corrupt,
                          "results line " + std::to_string(line_no) + " is malformed: " + e.what());
    }
  }
  return out;
}

core::result<results_file> read_results(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (err == ENOENT) return core::status(core::errc::not_found, "no results file " + path.string());
    return detail::sys_error(err, "open " + path.string());
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_results(ss.str());
}

}  // namespace faultline::harness
