#include "harness/results/results.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <optional>

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

std::string_view to_string(variant_kind k) noexcept { return k == variant_kind::command ? "command" : "scenario"; }

std::optional<variant_kind> variant_kind_from_string(std::string_view s) noexcept {
  if (s == "scenario") return variant_kind::scenario;
  if (s == "command") return variant_kind::command;
  return std::nullopt;
}

variant_identity identity_of(const run_record& r) {
  const auto& c = r.command;
  variant_kind kind = variant_kind::command;
  if (r.kind) kind = *r.kind;
  else if (c.empty() || (c.size() == 3 && c[1] == "run" && (r.name == c[2] || r.name.rfind(c[2] + "@", 0) == 0)))
    kind = variant_kind::scenario;
  if (kind == variant_kind::scenario || c.empty()) return {variant_kind::scenario, {r.name}};
  return {variant_kind::command, c};
}

std::string signal_name(int sig) {
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
    return sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  }
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  return "SIG" + std::to_string(sig);
}

std::string_view to_string(rank_state s) noexcept {
  switch (s) {
    case rank_state::in_collective: return "in-collective";
    case rank_state::outside: return "outside";
    case rank_state::dead: return "dead";
    case rank_state::exited: return "exited";
    case rank_state::missing: return "missing";
  }
  return "outside";
}

std::optional<rank_state> rank_state_from_string(std::string_view s) noexcept {
  for (auto st : {rank_state::in_collective, rank_state::outside, rank_state::dead, rank_state::exited, rank_state::missing})
    if (to_string(st) == s) return st;
  return std::nullopt;
}

void to_json(nlohmann::json& j, const nccl_rank_record& r) {
  j = nlohmann::json{{"rank", r.rank},   {"nranks", r.nranks},          {"pid", r.pid},
                     {"state", to_string(r.state)}, {"collectives", r.collectives}};
  if (!r.last_collective.empty()) j["last_collective"] = r.last_collective;
  if (!r.in_call.empty()) j["in_call"] = r.in_call;
  if (!r.fault.empty()) {
    j["fault"] = {{"action", r.fault}, {"api", r.fault_api}, {"call", r.fault_call}, {"result", r.fault_result}};
    if (!r.fault_item.empty()) j["fault"]["item"] = r.fault_item;
    if (r.fault_delay_ms != 0) j["fault"]["delay_ms"] = r.fault_delay_ms;
    if (r.fault_active) j["fault"]["active"] = true;
  }
  if (r.signal) j["signal"] = {{"name", signal_name(*r.signal)}, {"number", *r.signal}};
  if (r.exit_code) j["exit_code"] = *r.exit_code;
  if (r.completed) j["completed"] = *r.completed;
  if (r.front != 0) {
    j["front"] = {{"seq", r.front}, {"desync", r.desync}};
    if (!r.front_call.empty()) j["front"]["call"] = r.front_call;
  }
}

// Strict: a rank entry is written by the runner alone, so one that lacks a field or holds a
// wrong type is a damaged file, refused like any other malformed line.
void from_json(const nlohmann::json& j, nccl_rank_record& r) {
  if (!j.is_object()) throw nlohmann::json::type_error::create(302, "a rank must be an object, not " + j.dump(), &j);
  r.rank = j.at("rank").get<int>();
  r.nranks = j.at("nranks").get<int>();
  r.pid = j.at("pid").get<int>();
  const auto state = rank_state_from_string(j.at("state").get<std::string>());
  if (!state) throw nlohmann::json::other_error::create(501, "unknown rank state " + j.at("state").dump(), &j);
  r.state = *state;
  r.collectives = j.at("collectives").get<std::uint64_t>();
  r.last_collective = j.value("last_collective", std::string());
  r.in_call = j.value("in_call", std::string());
  r.fault.clear();
  r.fault_api.clear();
  r.fault_call = 0;
  r.fault_result = 0;
  if (auto f = j.find("fault"); f != j.end()) {
    r.fault = f->at("action").get<std::string>();
    r.fault_api = f->at("api").get<std::string>();
    r.fault_call = f->at("call").get<std::uint64_t>();
    r.fault_result = f->value("result", 0);
    r.fault_item = f->value("item", std::string());
    r.fault_delay_ms = f->value("delay_ms", std::uint64_t{0});
    r.fault_active = f->value("active", false);
  }
  r.signal.reset();
  if (auto sig = j.find("signal"); sig != j.end()) r.signal = sig->at("number").get<int>();
  r.exit_code.reset();
  if (auto e = j.find("exit_code"); e != j.end()) r.exit_code = e->get<int>();
  r.completed.reset();
  if (auto c = j.find("completed"); c != j.end()) r.completed = c->get<std::uint64_t>();
  r.front = 0;
  r.front_call.clear();
  r.desync = false;
  if (auto f = j.find("front"); f != j.end()) {
    r.front = f->at("seq").get<std::uint64_t>();
    r.desync = f->at("desync").get<bool>();
    r.front_call = f->value("call", std::string());
  }
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
  if (r.kind) j["kind"] = to_string(*r.kind);
  if (!r.replay.empty()) j["replay"] = r.replay;
  if (!r.points_reached.empty()) j["points_reached"] = r.points_reached;
  if (!r.frames.empty()) j["frames"] = r.frames;
  if (!r.late_cuda.empty()) {
    nlohmann::json late = nlohmann::json::array();
    for (const auto& l : r.late_cuda) late.push_back({{"api", l.api}, {"calls", l.calls}, {"signature", l.signature}});
    j["late_cuda"] = std::move(late);
  }
  if (!r.ranks.empty()) j["ranks"] = r.ranks;
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
  r.frames.clear();
  if (auto it = j.find("frames"); it != j.end() && !it->is_null()) r.frames = it->get<std::vector<std::string>>();
  r.leaked_pids = j.value("leaked_pids", std::vector<int>{});
  r.leaked_shm = j.value("leaked_shm", std::vector<std::string>{});
  r.timestamp = str("timestamp");
  r.command = j.value("command", std::vector<std::string>{});
  r.kind.reset();
  if (auto it = j.find("kind"); it != j.end() && !it->is_null()) {
    r.kind = variant_kind_from_string(it->get<std::string>());
    if (!r.kind) throw nlohmann::json::other_error::create(501, "unknown kind " + it->dump(), &j);
  }
  r.replay = j.value("replay", std::vector<std::string>{});
  r.points_reached = j.value("points_reached", std::vector<std::string>{});
  r.late_cuda.clear();
  if (auto late = j.find("late_cuda"); late != j.end()) {
    if (!late->is_array()) throw nlohmann::json::type_error::create(302, "late_cuda must be an array", &j);
    for (const auto& l : *late)
      r.late_cuda.push_back({l.at("api").get<std::string>(), l.at("calls").get<std::uint64_t>(),
                             l.value("signature", std::string())});
  }
  r.ranks.clear();
  if (auto ranks = j.find("ranks"); ranks != j.end()) {
    if (!ranks->is_array()) throw nlohmann::json::type_error::create(302, "ranks must be an array", &j);
    for (const auto& k : *ranks) r.ranks.push_back(k.get<nccl_rank_record>());
  }
}

results_writer::~results_writer() {
  if (fd_ >= 0) ::close(fd_);
}

core::status results_writer::open(const std::filesystem::path& path) {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return detail::sys_error(errno, "open " + path.string());
  path_ = path.string();
  return {};
}

core::status results_writer::append(const run_record& r) {
  // A program's output is not always UTF-8: invalid bytes become U+FFFD rather than an exception.
  std::string line = nlohmann::json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mu_);
  if (fd_ < 0) return core::status(core::errc::invalid_argument, "results file is not open");
  // A write that fails part-way (a full disk) is cut off again, so that the file keeps only
  // whole records: everything recorded before it stays readable, without a torn line.
  struct stat before {};
  const bool sized = ::fstat(fd_, &before) == 0;
  auto s = detail::write_all(fd_, line, "write " + path_);
  if (!s && sized) (void)::ftruncate(fd_, before.st_size);
  return s;
}

namespace {

// One line of a results file: blank (nullopt), a record, or the JSON error's text.
struct parsed_line {
  bool blank = false;
  std::optional<run_record> record;
  std::string error;
};

parsed_line parse_line(std::string_view line) {
  parsed_line out;
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    out.blank = true;
    return out;
  }
  try {
    out.record = nlohmann::json::parse(line).get<run_record>();
  } catch (const nlohmann::json::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

core::result<results_file> parse_results(std::string_view text) {
  results_file out;
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    ++line_no;
    std::size_t nl = text.find('\n', pos);
    const bool last = nl == std::string_view::npos;
    std::string_view line = text.substr(pos, last ? std::string_view::npos : nl - pos);
    pos = last ? text.size() : nl + 1;
    auto p = parse_line(line);
    if (p.blank) continue;
    if (p.record) {
      out.records.push_back(std::move(*p.record));
      continue;
    }
    // A writer killed mid-line leaves an unterminated tail: tolerated. Anything else means
    // the file is not what we wrote.
    if (last) {
      out.truncated_tail = true;
      break;
    }
    return core::status(core::errc::corrupt, "results line " + std::to_string(line_no) + " is malformed: " + p.error);
  }
  return out;
}

core::result<results_scan> scan_results(const std::filesystem::path& path, const record_visitor& visit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (err == ENOENT) return core::status(core::errc::not_found, "no results file " + path.string());
    return detail::sys_error(err, "open " + path.string());
  }
  results_scan scan;
  std::string line;
  while (std::getline(in, line)) {
    ++scan.lines;
    // getline stops at end of file without having seen a newline: this is the last line, and
    // it is unterminated.
    const bool unterminated = in.eof();
    const std::uint64_t size = line.size() + (unterminated ? 0 : 1);
    auto p = parse_line(line);
    if (!p.blank && !p.record) {
      if (unterminated) {
        scan.truncated_tail = true;
        scan.torn_bytes = size;
        break;
      }
      return core::status(core::errc::corrupt,
                          path.string() + " line " + std::to_string(scan.lines) + " is malformed: " + p.error);
    }
    scan.valid_bytes += size;
    scan.ends_with_newline = !unterminated;
    if (p.record) {
      ++scan.records;
      if (visit) {
        if (auto s = visit(std::move(*p.record), scan.lines); !s) return s;
      }
    }
  }
  if (in.bad()) return detail::sys_error(errno, "read " + path.string());
  return scan;
}

core::result<results_file> read_results(const std::filesystem::path& path) {
  results_file out;
  auto scan = scan_results(path, [&](run_record&& r, std::uint64_t) {
    out.records.push_back(std::move(r));
    return core::status();
  });
  if (!scan) return scan.error();
  out.truncated_tail = scan->truncated_tail;
  return out;
}

core::result<results_scan> recover_results(const std::filesystem::path& path, const record_visitor& visit) {
  auto scan = scan_results(path, visit);
  if (!scan) return scan;
  if (scan->truncated_tail && ::truncate(path.c_str(), static_cast<off_t>(scan->valid_bytes)) != 0)
    return detail::sys_error(errno, "truncate " + path.string());
  if (!scan->ends_with_newline) {
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return detail::sys_error(errno, "open " + path.string());
    auto s = detail::write_all(fd, "\n", "write " + path.string());
    ::close(fd);
    if (!s) return s;
    scan->ends_with_newline = true;
    ++scan->valid_bytes;
  }
  return scan;
}

}  // namespace faultline::harness
