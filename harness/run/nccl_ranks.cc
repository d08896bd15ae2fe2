#include "harness/run/nccl_ranks.h"

#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"
#include "harness/run/classify.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using agent::nccl_fault_action;
using agent::nccl_rank_state;

// The pid a file's name carries, 0 unless it is "nccl." and digits alone.
pid_t nccl_pid_of_name(std::string_view name) {
  const std::string_view prefix = agent::nccl_file_prefix;
  if (name.substr(0, prefix.size()) != prefix) return 0;
  const std::string_view digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos) return 0;
  return static_cast<pid_t>(std::stol(std::string(digits)));
}

// One read of the whole file, one byte more than the layout: a file of any other size is not a
// state of this layout (a writer of another version, or one cut short).
bool read_nccl_state(const fs::path& path, nccl_rank_state& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  char buf[sizeof(nccl_rank_state) + 1];
  std::size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
    if (got == sizeof buf) break;
  }
  ::close(fd);
  if (got != sizeof(nccl_rank_state)) return false;
  std::memcpy(&out, buf, sizeof out);
  return agent::nccl_state_valid(out);
}

std::string nccl_fault_name(std::uint32_t action) {
  switch (static_cast<nccl_fault_action>(action)) {
    case nccl_fault_action::stopped: return "stopped";
    case nccl_fault_action::killed: return "killed";
    case nccl_fault_action::aborted: return "aborted";
    case nccl_fault_action::failed: return "failed";
    case nccl_fault_action::delayed: return "delayed";
    case nccl_fault_action::none: break;
  }
  return "";
}

// The record of one file, everything but its state.
nccl_rank_record nccl_record_of(const nccl_rank_file& f, const rank_fates& fates) {
  const nccl_rank_state& s = f.state;
  nccl_rank_record r;
  r.rank = s.rank;
  r.nranks = s.nranks;
  auto host = fates.host_pid.find(f.pid);
  r.pid = host != fates.host_pid.end() ? host->second : f.pid;
  r.collectives = s.collectives;
  r.last_collective = std::string(agent::nccl_api_name(s.last_collective));
  r.in_call = std::string(agent::nccl_api_name(s.in_call));
  r.fault = nccl_fault_name(s.fault_action);
  if (!r.fault.empty()) {
    r.fault_api = std::string(agent::nccl_api_name(s.fault_api));
    r.fault_call = s.fault_call;
    r.fault_result = s.fault_result;
  }
  return r;
}

// A rank whose process is no more: dead by a signal (the one a point sent, else the one the
// runner reaped), exited, or gone without a known cause (dead): in a hang, or when it ended inside
// an NCCL call (a process does not exit from within one: a launcher killed it there).
void judge_ended_rank(nccl_rank_record& r, const nccl_rank_file& f, const rank_fates& fates) {
  const nccl_rank_state& s = f.state;
  const auto action = static_cast<nccl_fault_action>(s.fault_action);
  if ((action == nccl_fault_action::killed || action == nccl_fault_action::aborted) && s.fault_signal > 0) {
    r.state = rank_state::dead;
    r.signal = s.fault_signal;
    return;
  }
  if (auto st = fates.wait_status.find(f.pid); st != fates.wait_status.end()) {
    if (WIFSIGNALED(st->second)) {
      r.state = rank_state::dead;
      r.signal = WTERMSIG(st->second);
    } else {
      r.state = rank_state::exited;
    }
    return;
  }
  r.state = fates.hang || s.in_call != 0 ? rank_state::dead : rank_state::exited;
}

}  // namespace

std::vector<nccl_rank_file> read_nccl_ranks(const fs::path& run_dir) {
  std::vector<nccl_rank_file> out;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t pid = nccl_pid_of_name(it->path().filename().string());
    if (pid <= 0) continue;
    nccl_rank_file f;
    f.pid = pid;
    if (read_nccl_state(it->path(), f.state)) out.push_back(f);
  }
  std::sort(out.begin(), out.end(), [](const nccl_rank_file& a, const nccl_rank_file& b) { return a.pid < b.pid; });
  return out;
}

void add_crashed_ranks(const fs::path& run_dir, rank_fates& fates) {
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string_view prefix = agent::crash_file_prefix;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    auto text = detail::read_file(it->path(), 4096);  // the first line names the signal
    auto crash = text ? parse_crash(*text) : std::nullopt;
    if (crash && crash->signal > 0 && crash->signal < 128)
      fates.wait_status.emplace(static_cast<pid_t>(std::stol(digits)), crash->signal);  // a status: killed by it
  }
}

std::vector<nccl_rank_record> judge_ranks(const std::vector<nccl_rank_file>& files, const rank_fates& fates) {
  std::uint32_t top = 0;  // M: the highest sequence number of the run
  int nranks = -1;
  for (const auto& f : files) {
    top = std::max(top, f.state.collectives);
    nranks = std::max(nranks, f.state.nranks);
  }
  std::vector<nccl_rank_record> out;
  std::set<int> seen;
  for (const auto& f : files) {
    nccl_rank_record r = nccl_record_of(f, fates);
    const bool alive = fates.hang && fates.alive.count(f.pid);
    if (!alive) judge_ended_rank(r, f, fates);
    // A rank a point stopped before a collective never issued it, whatever its count says.
    else if (top > 0 && f.state.collectives == top && r.fault != "stopped") r.state = rank_state::in_collective;
    else r.state = rank_state::outside;
    if (r.state == rank_state::dead && f.state.fault_action == static_cast<std::uint32_t>(nccl_fault_action::stopped))
      r.signal.reset();  // the stop's SIGSTOP is not what it died by
    else if (r.state == rank_state::outside && r.fault == "stopped" && f.state.fault_signal > 0)
      r.signal = f.state.fault_signal;
    if (r.rank >= 0) seen.insert(r.rank);
    out.push_back(std::move(r));
  }
  for (int k = 0; k < nranks && k < 4096; ++k) {
    if (seen.count(k)) continue;
    nccl_rank_record m;
    m.rank = k;
    m.nranks = nranks;
    m.state = rank_state::missing;
    out.push_back(std::move(m));
  }
  std::stable_sort(out.begin(), out.end(), [](const nccl_rank_record& a, const nccl_rank_record& b) {
    if ((a.rank < 0) != (b.rank < 0)) return a.rank >= 0;
    return a.rank != b.rank ? a.rank < b.rank : a.pid < b.pid;
  });
  return out;
}

}  // namespace faultline::harness
