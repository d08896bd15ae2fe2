#include "harness/run/nccl_ranks.h"

#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"
#include "harness/run/classify.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <ctime>

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

// --- The front: the first collective that did not complete everywhere ---

using agent::nccl_collective_entry;

std::string_view datatype_name(std::uint32_t t) {
  static constexpr std::string_view names[] = {"int8", "uint8", "int32", "uint32", "int64",
                                               "uint64", "float16", "float32", "float64", "bfloat16"};
  return t < std::size(names) ? names[t] : std::string_view{};
}

std::string_view op_name(std::uint32_t op) {
  static constexpr std::string_view names[] = {"sum", "prod", "max", "min", "avg"};
  return op < std::size(names) ? names[op] : std::string_view{};
}

// "ncclBroadcast(count 1024, float32, root 0)", "ncclAllReduce(count 64, float32, sum)".
std::string call_text(const nccl_collective_entry& e) {
  std::string text = std::string(agent::nccl_api_name(e.api)) + "(count " + std::to_string(e.count);
  const std::string_view type = datatype_name(e.datatype);
  text += type.empty() ? ", datatype " + std::to_string(e.datatype) : ", " + std::string(type);
  if (e.root >= 0) text += ", root " + std::to_string(e.root);
  if (e.op != agent::nccl_no_op) {
    const std::string_view op = op_name(e.op);
    text += op.empty() ? ", op " + std::to_string(e.op) : ", " + std::string(op);
  }
  return text + ")";
}

bool same_call(const nccl_collective_entry& a, const nccl_collective_entry& b) {
  return a.api == b.api && a.count == b.count && a.datatype == b.datatype && a.root == b.root && a.op == b.op;
}

// One rank's part in one communicator.
struct comm_view {
  const nccl_rank_file* file = nullptr;
  std::uint64_t issued = 0;  // collectives it issued on the communicator
  std::map<std::uint64_t, const nccl_collective_entry*> by_number;  // the ring's entries on it
  std::uint64_t completed_seq = 0;  // the rank's own sequence numbers up to this one are complete
};

// Each rank's view of communicator `comm` (0: the collectives on no known communicator).
std::vector<comm_view> views_of(const std::vector<nccl_rank_file>& files, std::uint64_t comm) {
  std::vector<comm_view> out;
  for (const auto& f : files) {
    const nccl_rank_state& s = f.state;
    comm_view v;
    v.file = &f;
    bool member = comm == 0;
    for (std::uint32_t i = 0; i < s.comm_count && i < agent::nccl_comm_slots; ++i)
      if (s.comm_table[i].id == comm) {
        member = true;
        v.issued = s.comm_table[i].collectives;
      }
    if (!member) continue;
    const std::uint32_t oldest = s.collectives > agent::nccl_ring_size ? s.collectives - agent::nccl_ring_size + 1 : 1;
    for (const auto& e : s.ring) {
      if (e.seq == 0 || e.seq < oldest || e.seq > s.collectives || e.comm != comm) continue;
      v.by_number[e.comm_seq] = &e;
      if (comm == 0) v.issued = std::max<std::uint64_t>(v.issued, e.comm_seq);
    }
    // Without events, a collective is complete once its call returned (the stand-in's null stream).
    const bool in_collective_call = agent::nccl_api_is_collective(s.in_call);
    v.completed_seq = s.completion_known ? s.completed : s.collectives - (in_collective_call && s.collectives > 0 ? 1 : 0);
    out.push_back(std::move(v));
  }
  return out;
}

struct front_found {
  std::uint64_t number = 0;  // 0: none
  bool desync = false;
};

// The front of one communicator (see the file comment).
front_found front_of(const std::vector<comm_view>& views) {
  front_found none;
  if (views.empty()) return none;
  std::uint64_t most = 0, least = UINT64_MAX;
  for (const auto& v : views) {
    most = std::max(most, v.issued);
    least = std::min(least, v.issued);
  }
  const std::uint64_t from = most > agent::nccl_ring_size ? most - agent::nccl_ring_size + 1 : 1;
  if (least + 1 < from) return {least + 1, false};  // far behind: the rest is out of its ring
  for (std::uint64_t k = from; k <= most; ++k) {
    if (k > least) return {k, false};  // some rank never issued it
    const nccl_collective_entry* first = nullptr;
    bool completed = false, known = true;
    for (const auto& v : views) {
      auto e = v.by_number.find(k);
      if (e == v.by_number.end()) {
        known = false;  // its record of it is gone: long done
        continue;
      }
      if (first != nullptr && !same_call(*first, *e->second)) return {k, true};
      if (first == nullptr) first = e->second;
      if (e->second->seq <= v.completed_seq) completed = true;
    }
    if (!completed && known) return {k, false};
  }
  return none;
}

// The run's front: the first communicator (in the lowest rank's order of making them) that has one.
std::pair<std::uint64_t, front_found> run_front(const std::vector<nccl_rank_file>& files) {
  std::vector<std::uint64_t> comms;
  std::vector<const nccl_rank_file*> by_rank;
  for (const auto& f : files) by_rank.push_back(&f);
  std::stable_sort(by_rank.begin(), by_rank.end(), [](const nccl_rank_file* a, const nccl_rank_file* b) {
    return (a->state.rank < 0 ? INT32_MAX : a->state.rank) < (b->state.rank < 0 ? INT32_MAX : b->state.rank);
  });
  for (const auto* f : by_rank)
    for (std::uint32_t i = 0; i < f->state.comm_count && i < agent::nccl_comm_slots; ++i)
      if (std::find(comms.begin(), comms.end(), f->state.comm_table[i].id) == comms.end()) comms.push_back(f->state.comm_table[i].id);
  comms.push_back(0);
  for (std::uint64_t comm : comms) {
    const front_found found = front_of(views_of(files, comm));
    if (found.number != 0) return {comm, found};
  }
  return {0, {}};
}

// What the rank issued as collective `number` on `comm` (`issued`): its call, "" when it did not
// issue it or its ring no longer holds it.
std::string front_call_of(const nccl_rank_file& f, std::uint64_t comm, std::uint64_t number, bool& issued) {
  issued = false;
  // The views point into this vector: it must outlive the loop (a `{f}` made in the range
  // expression is gone before the body runs).
  const std::vector<nccl_rank_file> one{f};
  for (const comm_view& v : views_of(one, comm)) {
    if (v.issued < number) return "";
    issued = true;
    auto e = v.by_number.find(number);
    return e != v.by_number.end() ? call_text(*e->second) : "";
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
    const std::string_view item(s.fault_item, ::strnlen(s.fault_item, sizeof s.fault_item));
    r.fault_item = std::string(item.substr(0, item.find('@')));  // the point, without its filter
    r.fault_delay_ms = s.fault_delay_ns / 1'000'000;
    r.fault_active = s.fault_active != 0 && s.fault_action == static_cast<std::uint32_t>(nccl_fault_action::delayed);
  }
  if (s.exited) r.exit_code = s.exit_code;
  if (s.completion_known) r.completed = s.completed;
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
  int nranks = -1;
  for (const auto& f : files) nranks = std::max(nranks, f.state.nranks);
  const auto [front_comm, front] = run_front(files);
  std::vector<nccl_rank_record> out;
  std::set<int> seen;
  for (const auto& f : files) {
    nccl_rank_record r = nccl_record_of(f, fates);
    bool issued = false;
    if (front.number != 0) {
      r.front = front.number;
      r.desync = front.desync;
      r.front_call = front_call_of(f, front_comm, front.number, issued);
    }
    const bool alive = fates.hang && fates.alive.count(f.pid);
    if (!alive) judge_ended_rank(r, f, fates);
    else if (issued) r.state = rank_state::in_collective;
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

std::size_t ask_ranks_for_completion(const fs::path& run_dir, const std::set<pid_t>& alive, std::chrono::milliseconds budget) {
  struct asked {
    nccl_rank_state* s;
    std::uint32_t request;
  };
  std::vector<asked> waiting;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t pid = nccl_pid_of_name(it->path().filename().string());
    if (pid <= 0 || !alive.count(pid)) continue;
    const int fd = ::open(it->path().c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {};
    void* at = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(sizeof(nccl_rank_state)))
      at = ::mmap(nullptr, sizeof(nccl_rank_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (at == MAP_FAILED) continue;
    auto* s = static_cast<nccl_rank_state*>(at);
    if (!agent::nccl_state_valid(*s) || __atomic_load_n(&s->answers, __ATOMIC_ACQUIRE) == 0) {
      ::munmap(at, sizeof(nccl_rank_state));
      continue;
    }
    const std::uint32_t request = __atomic_add_fetch(&s->query_request, 1, __ATOMIC_ACQ_REL);
    ::syscall(SYS_futex, &s->query_request, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
    waiting.push_back({s, request});
  }
  std::size_t answered = 0;
  const auto until = std::chrono::steady_clock::now() + budget;
  for (const auto& a : waiting) {
    for (;;) {
      const std::uint32_t answer = __atomic_load_n(&a.s->query_answer, __ATOMIC_ACQUIRE);
      if (static_cast<std::int32_t>(answer - a.request) >= 0) {
        ++answered;
        break;
      }
      const auto left = until - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) break;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      const timespec wait{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      ::syscall(SYS_futex, &a.s->query_answer, FUTEX_WAIT, answer, &wait, nullptr, 0);
    }
  }
  for (const auto& a : waiting) ::munmap(a.s, sizeof(nccl_rank_state));
  return answered;
}

bool a_live_rank_was_working(const std::vector<nccl_rank_file>& files, const rank_fates& fates) {
  return fates.hang && std::any_of(files.begin(), files.end(), [&](const nccl_rank_file& f) {
           return fates.alive.count(f.pid) != 0 && f.state.exited == 0;
         });
}

}  // namespace faultline::harness
