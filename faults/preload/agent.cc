#include "faults/preload/agent.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/host_ids.h"
#include "faults/preload/detail/sys.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/phase_table.h"
#include "faults/preload/protocol.h"

#if FAULTLINE_AGENT_HAVE_DEMANGLER
// libsupc++'s callback demangler (the one std::terminate's verbose handler uses): it keeps its
// working state in stack arrays and hands out pieces through the callback, so unlike
// abi::__cxa_demangle it never calls malloc. libstdc++.so does not export it; the build links
// the object from libsupc++.a.
extern "C" int __gcclibcxx_demangle_callback(const char* mangled,
                                             void (*callback)(const char*, std::size_t, void*),
                                             void* opaque);
#endif

namespace faultline::agent {
namespace {

namespace sys = detail::sys;
using detail::fd_writer;
using detail::fixed_string;
using path_string = fixed_string<PATH_MAX>;

constexpr int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP};
constexpr int crash_signal_count = sizeof(crash_signals) / sizeof(crash_signals[0]);

constexpr std::size_t alt_stack_bytes = 256 * 1024;
// Demangling needs about 70 bytes of stack per character of the mangled name; below this much
// alternate stack, or on a thread's own stack (of unknown headroom), names stay mangled.
constexpr std::size_t demangle_min_stack_bytes = 128 * 1024;
constexpr std::size_t max_demangle_chars = 1024;
constexpr int max_frames = 128;
constexpr int stderr_frames = 16;
constexpr std::size_t max_marker_chars = 200;
constexpr int max_dump_threads = 8192;

// How long the stack-dump coordinator waits for one thread to start answering, then to finish
// writing, and for the whole dump; and how long a second crashing thread waits for the first
// thread's report before it lets its own signal kill the process.
constexpr std::int64_t dump_answer_wait_ms = 2000;
constexpr std::int64_t dump_write_wait_ms = 5000;
constexpr std::int64_t dump_budget_ms = 20000;
constexpr std::int64_t crash_peer_wait_ms = 10000;

enum install_step : int { install_idle, install_running, install_done };

std::atomic<int> install_progress{install_idle};
install_result install_outcome;  // published by install_progress = install_done (release)
std::atomic<bool> agent_active{false};

char run_dir_path[PATH_MAX];
char exe_path[PATH_MAX];
bool quiet_mode = false;

// How a crash is reported (protocol.h, "Crash capture").
enum class crash_mode { report, minimal, stop, off };
crash_mode crash_reporting = crash_mode::report;
int crash_channel_fd = -1;

// Where this process's markers go: its slot in the run's phase table (phase_table.h), or else
// phase.PID, mapped shared. Either way a mark is a store, not a system call. The table's mapping
// is inherited by a forked child, which claims a slot of its own; phase_used counts the bytes of
// phase.PID written (marks reserve their span with one fetch_add, so concurrent marks never
// overlap; in a slot, its `used` field does the same).
char* phase_table = nullptr;
phase_slot* own_slot = nullptr;
char* phase_map = nullptr;
std::atomic<std::uint32_t> phase_used{0};
struct sigaction previous_actions[crash_signal_count];

std::atomic<pid_t> crash_owner{0};

// Where the runner reads this run's cores (protocol.h, FAULTLINE_AGENT_CORE_HOME); empty when
// cores do not follow the working directory.
char core_home_path[PATH_MAX];

// Stack dump state. dump_request packs (tid << 8 | request_state) so that the coordinator and
// the asked thread hand the request over with one compare-and-swap.
enum request_state : std::uint64_t { request_asked = 1, request_writing = 2, request_answered = 3,
                                     request_abandoned = 4 };
std::atomic<bool> dump_active{false};
std::atomic<std::uint64_t> dump_request{0};
pid_t dump_tids[max_dump_threads];

[[gnu::tls_model("initial-exec")]] thread_local void* agent_stack_mapping = nullptr;

std::uint64_t pack_request(pid_t tid, request_state state) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(tid)) << 8) | state;
}

pid_t current_tid() noexcept { return static_cast<pid_t>(::syscall(SYS_gettid)); }

std::int64_t now_ms() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(long ms) noexcept {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

std::size_t page_bytes() noexcept {
  long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<std::size_t>(page) : 4096;
}

const char* signal_name(int sig) noexcept {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGTRAP: return "SIGTRAP";
    default: return "SIG?";
  }
}

void pid_file_path(path_string& path, const char* prefix, pid_t pid) noexcept {
  path.str(run_dir_path).str("/").str(prefix).dec(static_cast<std::uint64_t>(pid));
}

int open_pid_file(const char* prefix, pid_t pid, int flags) noexcept {
  path_string path;
  pid_file_path(path, prefix, pid);
  if (path.overflowed()) return -1;
  int fd;
  do {
    fd = sys::open(path.c_str(), flags | O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Maps the run's phase table when the directory has one of this layout; leaves phase_table null
// otherwise.
void map_phase_table() noexcept {
  phase_table = nullptr;
  path_string path;
  path.str(run_dir_path).str("/").str(phase_table_file);
  if (path.overflowed()) return;
  int fd;
  do {
    fd = sys::open(path.c_str(), O_RDWR | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return;
  struct stat st {};
  void* map = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size == phase_table_bytes) {
    map = sys::mmap(nullptr, phase_table_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  sys::close(fd);
  if (map == MAP_FAILED) return;
  if (!phase_table_valid(*static_cast<const phase_table_header*>(map))) {
    sys::munmap(map, phase_table_bytes);
    return;
  }
  phase_table = static_cast<char*>(map);
}

// This process's slot in the mapped table: the one its pid already holds (an earlier image of
// this process, before an exec, keeps its markers), else a new one; null when the table is full.
phase_slot* claim_phase_slot(pid_t pid) noexcept {
  auto* header = reinterpret_cast<phase_table_header*>(phase_table);
  auto* slots = reinterpret_cast<phase_slot*>(phase_table + phase_slot_bytes);
  std::uint32_t handed = __atomic_load_n(&header->next, __ATOMIC_ACQUIRE);
  for (std::uint32_t k = 0; k < handed && k < phase_table_slots; ++k) {
    if (__atomic_load_n(&slots[k].pid, __ATOMIC_ACQUIRE) == pid) return &slots[k];
  }
  std::uint32_t k = __atomic_fetch_add(&header->next, 1, __ATOMIC_ACQ_REL);
  if (k >= phase_table_slots) return nullptr;
  __atomic_store_n(&slots[k].used, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&slots[k].pid, static_cast<std::int32_t>(pid), __ATOMIC_RELEASE);
  return &slots[k];
}

// Maps phase.PID of the calling process (created at phase_file_bytes, or reopened after exec
// with its marks kept). Leaves phase_map null when that fails: marks then use write(2).
void map_phase_file() noexcept {
  phase_map = nullptr;
  phase_used.store(0, std::memory_order_relaxed);
  path_string path;
  pid_file_path(path, phase_file_prefix, core::host_pid());
  if (path.overflowed()) return;
  int fd;
  do {
    fd = sys::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // mmap needs read access
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (st.st_size != 0 && st.st_size != phase_file_bytes) ||
      (st.st_size == 0 && sys::ftruncate(fd, phase_file_bytes) != 0)) {
    sys::close(fd);
    return;
  }
  void* map = sys::mmap(nullptr, phase_file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  sys::close(fd);
  if (map == MAP_FAILED) return;
  phase_map = static_cast<char*>(map);
  // After an exec the same pid's earlier image has marked already: continue after its marks.
  const void* end = std::memchr(phase_map, '\0', phase_file_bytes);
  phase_used.store(end ? static_cast<std::uint32_t>(static_cast<const char*>(end) - phase_map)
                       : phase_file_bytes,
                   std::memory_order_relaxed);
}

// Where this process's markers go, once per process (and again in a forked child): its slot in
// the table, or phase.PID.
void open_phase_record() noexcept {
  own_slot = phase_table != nullptr ? claim_phase_slot(core::host_pid()) : nullptr;
  if (own_slot == nullptr) map_phase_file();
}

bool append_marker(const char* marker) noexcept {
  char line[max_marker_chars + 2];
  std::size_t n = ::strnlen(marker, max_marker_chars + 1);
  if (n == 0 || n > max_marker_chars || std::memchr(marker, '\n', n) != nullptr) return false;
  std::memcpy(line, marker, n);
  line[n] = '\n';
  if (own_slot != nullptr) {
    const auto bytes = static_cast<std::uint32_t>(n + 1);
    const std::uint32_t at = __atomic_fetch_add(&own_slot->used, bytes, __ATOMIC_RELAXED);
    if (at + bytes > sizeof(own_slot->markers)) return false;  // full: later marks are dropped
    std::memcpy(own_slot->markers + at, line, n + 1);
    return true;
  }
  if (phase_map != nullptr) {
    const auto bytes = static_cast<std::uint32_t>(n + 1);
    const std::uint32_t at = phase_used.fetch_add(bytes, std::memory_order_relaxed);
    if (at + bytes > phase_file_bytes) return false;  // full: later marks are dropped
    std::memcpy(phase_map + at, line, n + 1);
    return true;
  }
  int fd = open_pid_file(phase_file_prefix, core::host_pid(), O_APPEND);
  if (fd < 0) return false;
  bool ok = detail::write_all(fd, line, n + 1);  // one write: concurrent marks stay whole lines
  sys::close(fd);
  return ok;
}

void thread_name(char (&name)[17]) noexcept {
  name[0] = '\0';
  ::prctl(PR_GET_NAME, name, 0, 0, 0);
  name[16] = '\0';
}

void thread_name_of(pid_t tid, char (&name)[17]) noexcept {
  name[0] = '\0';
  path_string path;
  path.str("/proc/self/task/").dec(static_cast<std::uint64_t>(tid)).str("/comm");
  int fd = sys::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = sys::read(fd, name, 16);
  sys::close(fd);
  if (n <= 0) return;
  name[n] = '\0';
  if (name[n - 1] == '\n') name[n - 1] = '\0';
}

// Whether thread `tid` blocks `sig`, from the SigBlk mask in /proc/self/task/TID/status. Such a
// thread cannot answer, and asking it would only cost the whole answer wait.
bool thread_blocks(pid_t tid, int sig) noexcept {
  path_string path;
  path.str("/proc/self/task/").dec(static_cast<std::uint64_t>(tid)).str("/status");
  int fd = sys::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[4096];
  ssize_t n = sys::read(fd, text, sizeof(text) - 1);
  sys::close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char* field = std::strstr(text, "\nSigBlk:");
  if (field == nullptr) return false;
  std::uint64_t mask = 0;
  for (const char* c = field + 8; *c != '\0' && *c != '\n'; ++c) {
    if (*c >= '0' && *c <= '9') {
      mask = mask << 4 | static_cast<std::uint64_t>(*c - '0');
    } else if (*c >= 'a' && *c <= 'f') {
      mask = mask << 4 | static_cast<std::uint64_t>(*c - 'a' + 10);
    }
  }
  return sig >= 1 && sig <= 64 && ((mask >> (sig - 1)) & 1) != 0;
}

bool thread_exists(pid_t tid) noexcept {
  path_string path;
  path.str("/proc/self/task/").dec(static_cast<std::uint64_t>(tid));
  return ::access(path.c_str(), F_OK) == 0;
}

// The interrupted instruction, from the signal's user context; 0 where the architecture is not
// known (then frames are written from the unwinder alone).
std::uintptr_t context_pc(const void* context) noexcept {
  if (context == nullptr) return 0;
  const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__i386__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_EIP]);
#elif defined(__aarch64__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.pc);
#else
  (void)uc;
  return 0;
#endif
}

// The return addresses of the calling thread's frames, innermost first, as backtrace(3) gives
// them. Through libgcc's unwinder directly: glibc's backtrace() dlopen()s libgcc_s on first use,
// and that load (with its CPU feature probe, which traps in a virtual machine) was most of what
// the agent cost a short-lived process. The preloaded agent links the unwinder statically.
struct unwind_walk {
  void** out;
  int capacity;
  int count;
};

_Unwind_Reason_Code unwind_step(_Unwind_Context* context, void* arg) noexcept {
  auto* walk = static_cast<unwind_walk*>(arg);
  if (walk->count >= walk->capacity) return _URC_END_OF_STACK;
  _Unwind_Ptr ip = _Unwind_GetIP(context);
  if (ip == 0) return _URC_END_OF_STACK;
  walk->out[walk->count++] = reinterpret_cast<void*>(ip);
  return _URC_NO_REASON;
}

[[gnu::noinline]] int unwind_frames(void** out, int capacity) noexcept {
  unwind_walk walk{out, capacity, 0};
  _Unwind_Backtrace(&unwind_step, &walk);
  // The first frame is unwind_frames itself, as backtrace() drops its own.
  if (walk.count > 0) {
    std::memmove(out, out + 1, static_cast<std::size_t>(walk.count - 1) * sizeof(void*));
    --walk.count;
  }
  return walk.count;
}

// Unwinds the calling thread from inside a signal handler and drops the agent's own frames: the
// unwinder passes through the kernel's signal frame, and the frame after it carries exactly the
// interrupted pc, so everything before that frame is the handler.
int capture_frames(void** out, const void* context) noexcept {
  void* raw[max_frames + 16];
  int n = unwind_frames(raw, max_frames + 16);
  std::uintptr_t pc = context_pc(context);
  int start = -1;
  for (int i = 0; pc != 0 && i < n; ++i) {
    if (reinterpret_cast<std::uintptr_t>(raw[i]) == pc) {
      start = i;
      break;
    }
  }
  int count = 0;
  if (start < 0) {
    if (pc != 0) out[count++] = reinterpret_cast<void*>(pc);
    start = 0;
  }
  for (int i = start; i < n && count < max_frames; ++i) out[count++] = raw[i];
  return count;
}

detail::frame_text resolve_frame(std::uintptr_t address, bool return_address) noexcept {
  detail::frame_text frame;
  frame.address = address;
  // A return address may already lie in the next function when the call was the caller's last
  // instruction (a noreturn call); look up the call instruction instead.
  std::uintptr_t lookup = return_address && address > 0 ? address - 1 : address;
  Dl_info info{};
  link_map* map = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(lookup), &info, reinterpret_cast<void**>(&map),
                RTLD_DL_LINKMAP) == 0) {
    return frame;
  }
  if (map != nullptr) {
    frame.module = map->l_name != nullptr && map->l_name[0] != '\0' ? map->l_name : exe_path;
    frame.offset = address - static_cast<std::uintptr_t>(map->l_addr);
  } else if (info.dli_fname != nullptr) {
    frame.module = info.dli_fname;
    frame.offset = address - reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  }
  frame.symbol = info.dli_sname;
  return frame;
}

#if FAULTLINE_AGENT_HAVE_DEMANGLER
bool demangle_without_malloc(const char* mangled,
                             void (*sink)(const char*, std::size_t, void*),
                             void* opaque) noexcept {
  return __gcclibcxx_demangle_callback(mangled, sink, opaque) == 0;
}
constexpr detail::demangle_fn demangler = &demangle_without_malloc;
#else
constexpr detail::demangle_fn demangler = nullptr;
#endif

bool may_demangle_here() noexcept {
  stack_t current{};
  if (::sigaltstack(nullptr, &current) != 0) return false;
  return (current.ss_flags & SS_ONSTACK) != 0 && current.ss_size >= demangle_min_stack_bytes;
}

void write_frames(fd_writer& out, void* const* frames, int count, bool demangle, int first = 0) noexcept {
  for (int k = first; k < count; ++k) {
    detail::frame_text frame = resolve_frame(reinterpret_cast<std::uintptr_t>(frames[k]), k > 0);
    detail::write_frame_line(out, k, frame, demangle ? demangler : nullptr, max_demangle_chars);
  }
}

void report_crash(int sig, pid_t tid, const void* context) noexcept {
  char name[17];
  thread_name(name);
  pid_t pid = core::host_pid();
  int fd = open_pid_file(crash_file_prefix, pid, O_TRUNC);
  const bool demangle = may_demangle_here();
  if (fd >= 0) {
    // The header goes out first: it survives even if unwinding or symbol lookup faults.
    fd_writer out(fd);
    out.str("signal ").dec(sig).chr(' ').str(signal_name(sig)).chr('\n');
    out.str("thread ").dec(tid).chr(' ').str(name).chr('\n');
    // So does frame #0, the interrupted pc from the signal context: unwinding can fault too (a
    // crash inside a library that is being torn down, seen with libcuda at exit), and the pc
    // alone still names the module and offset.
    const std::uintptr_t pc = context_pc(context);
    if (pc != 0) {
      detail::write_frame_line(out, 0, resolve_frame(pc, false), demangle ? demangler : nullptr,
                               max_demangle_chars);
    }
    out.flush();
  }
  void* frames[max_frames];
  int count = capture_frames(frames, context);
  if (fd >= 0) {
    {
      // capture_frames always puts the interrupted pc first; it is already in the file.
      fd_writer out(fd);
      write_frames(out, frames, count, demangle, context_pc(context) != 0 ? 1 : 0);
    }
    sys::close(fd);
  }
  if (quiet_mode) return;
  fd_writer err(STDERR_FILENO);
  err.str("faultline-agent: signal ").dec(sig).chr(' ').str(signal_name(sig)).str(" in pid ")
      .dec(pid).str(" thread ").dec(tid).str(" (").str(name).str(")\n");
  int shown = count < stderr_frames ? count : stderr_frames;
  write_frames(err, frames, shown, demangle);
  if (shown < count) err.str("  ... ").dec(count - shown).str(" more frames\n");
  path_string path;
  pid_file_path(path, crash_file_prefix, pid);
  err.str("faultline-agent: crash report ").str(fd >= 0 ? path.c_str() : "not written")
      .chr('\n');
  err.flush();
  if (!err.ok()) {
    // stderr may be a pipe nobody reads any more: the SIGPIPE that write raised is blocked
    // (crash_handler's mask) and is dropped here, so the process still dies by `sig`.
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    timespec no_wait{0, 0};
    ::sigtimedwait(&pipe_signal, nullptr, &no_wait);
  }
}

// Hands the signal on: the action that was there before the agent (the default one when that
// was "ignore", which cannot stop a fatal fault anyway) gets the signal once this handler
// returns, since the signal stays blocked until then. For a fault the instruction would fault
// again anyway; re-raising also covers signals that were sent, and SIGTRAP, whose pc has moved.
void pass_on(int sig, pid_t tid) noexcept {
  struct sigaction next {};
  next.sa_handler = SIG_DFL;
  for (int i = 0; i < crash_signal_count; ++i) {
    if (crash_signals[i] == sig && previous_actions[i].sa_handler != SIG_IGN) {
      next = previous_actions[i];
    }
  }
  sys::sigaction(sig, &next, nullptr);
  ::syscall(SYS_tgkill, ::getpid(), tid, sig);
}

// The crash file's header and frame #0 only, from the signal context: no unwinding, one open
// and one write, so the signal goes on within microseconds of the fault.
void report_crash_briefly(int sig, pid_t tid, const void* context) noexcept {
  char name[17];
  thread_name(name);
  int fd = open_pid_file(crash_file_prefix, core::host_pid(), O_TRUNC);
  if (fd < 0) return;
  {
    fd_writer out(fd);
    out.str("signal ").dec(sig).chr(' ').str(signal_name(sig)).chr('\n');
    out.str("thread ").dec(tid).chr(' ').str(name).chr('\n');
    if (const std::uintptr_t pc = context_pc(context); pc != 0) {
      detail::write_frame_line(out, 0, resolve_frame(pc, false), nullptr, max_demangle_chars);
    }
  }
  sys::close(fd);
}

// Tells the runner and stops the whole process (all threads) until it has taken every thread's
// stack from outside. False when the runner cannot be told: nothing was stopped.
bool stop_for_runner(int sig) noexcept {
  if (crash_channel_fd < 0) return false;
  fixed_string<96> text;
  // The runner attaches to these ids: the host's, also from inside a PID namespace.
  text.str("crash ").dec(static_cast<std::uint64_t>(core::host_pid())).str(" ")
      .dec(static_cast<std::uint64_t>(core::host_tid())).str(" ").dec(static_cast<std::uint64_t>(sig)).str("\n");
  if (text.overflowed()) return false;
  // One write below PIPE_BUF: atomic among the run's processes. SIGPIPE is blocked here.
  if (sys::write(crash_channel_fd, text.c_str(), text.size()) != static_cast<ssize_t>(text.size())) return false;
  sys::kill(::getpid(), SIGSTOP);
  return true;
}

void crash_handler(int sig, siginfo_t*, void* context) {
  int saved_errno = errno;
  pid_t self = current_tid();
  pid_t owner = 0;
  if (crash_owner.compare_exchange_strong(owner, self)) {
    switch (crash_reporting) {
      case crash_mode::report:
        report_crash(sig, self, context);
        break;
      case crash_mode::stop:
        stop_for_runner(sig);
        report_crash_briefly(sig, self, context);
        break;
      case crash_mode::minimal:
        report_crash_briefly(sig, self, context);
        break;
      case crash_mode::off:  // no handler is installed in this mode
        break;
    }
  } else if (owner != self) {
    // Another thread is writing its report and will take the process down; if its report
    // hangs, this thread's own signal does.
    std::int64_t until = now_ms() + crash_peer_wait_ms;
    while (now_ms() < until) sleep_ms(10);
  }
  // owner == self: a second signal while reporting (the report itself faulted): just pass on.
  pass_on(sig, self);
  errno = saved_errno;
}

void write_thread_block(int fd, pid_t tid, const void* context) noexcept {
  void* frames[max_frames];
  int count = capture_frames(frames, context);
  char name[17];
  thread_name(name);
  fd_writer out(fd);
  out.str("thread ").dec(tid).chr(' ').str(name).chr('\n');
  write_frames(out, frames, count, may_demangle_here());
  out.chr('\n');
}

void write_silent_block(int fd, pid_t tid) noexcept {
  char name[17];
  thread_name_of(tid, name);
  fd_writer out(fd);
  out.str("thread ").dec(tid).chr(' ').str(name).str("\n\n");
}

int list_threads(pid_t* tids, int capacity) noexcept {
  int dir = sys::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  int count = 0;
  alignas(8) char entries[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, entries, sizeof(entries));
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[].
      unsigned short reclen;
      std::memcpy(&reclen, entries + at + 16, sizeof(reclen));
      const char* entry_name = entries + at + 19;
      long tid = 0;
      bool numeric = entry_name[0] != '\0';
      for (const char* c = entry_name; *c != '\0'; ++c) {
        if (*c < '0' || *c > '9') numeric = false;
        tid = tid * 10 + (*c - '0');
      }
      if (numeric && count < capacity) tids[count++] = static_cast<pid_t>(tid);
      at += reclen;
    }
  }
  sys::close(dir);
  return count;
}

bool wait_for_request(std::uint64_t wanted, std::int64_t wait_ms) noexcept {
  std::int64_t until = now_ms() + wait_ms;
  for (;;) {
    if (dump_request.load(std::memory_order_acquire) == wanted) return true;
    if (now_ms() >= until) return false;
    sleep_ms(1);
  }
}

// One thread at a time: the coordinator asks a thread through dump_request and a tgkill, the
// thread appends its block, and only then is the next thread asked, so blocks never interleave.
void coordinate_dump(int sig, pid_t self, const void* context) noexcept {
  int fd = open_pid_file(stacks_file_prefix, core::host_pid(), O_APPEND);
  if (fd < 0) return;
  int count = list_threads(dump_tids, max_dump_threads);
  std::int64_t deadline = now_ms() + dump_budget_ms;
  pid_t pid = ::getpid();
  for (int i = 0; i < count; ++i) {
    pid_t tid = dump_tids[i];
    if (tid == self) {
      write_thread_block(fd, self, context);
      continue;
    }
    if (now_ms() >= deadline || thread_blocks(tid, sig)) {
      if (thread_exists(tid)) write_silent_block(fd, tid);
      continue;
    }
    dump_request.store(pack_request(tid, request_asked), std::memory_order_release);
    if (::syscall(SYS_tgkill, pid, tid, sig) != 0) {  // the thread has exited
      dump_request.store(0, std::memory_order_release);
      continue;
    }
    if (!wait_for_request(pack_request(tid, request_answered), dump_answer_wait_ms)) {
      std::uint64_t asked = pack_request(tid, request_asked);
      if (dump_request.compare_exchange_strong(asked, pack_request(tid, request_abandoned))) {
        if (thread_exists(tid)) write_silent_block(fd, tid);
      } else {
        wait_for_request(pack_request(tid, request_answered), dump_write_wait_ms);
      }
    }
    dump_request.store(0, std::memory_order_release);
  }
  {
    fd_writer out(fd);
    out.str(stacks_end_line).chr('\n');
  }
  sys::close(fd);
}

void dump_handler(int sig, siginfo_t* info, void* context) {
  int saved_errno = errno;
  pid_t self = current_tid();
  bool from_agent = info != nullptr && info->si_code == SI_TKILL && info->si_pid == ::getpid();
  if (from_agent) {
    // The coordinator's request: answer it only if it is still open for this thread (a late
    // signal after the coordinator gave up, or a stray one, is dropped).
    std::uint64_t asked = pack_request(self, request_asked);
    if (dump_request.compare_exchange_strong(asked, pack_request(self, request_writing))) {
      int fd = open_pid_file(stacks_file_prefix, core::host_pid(), O_APPEND);
      if (fd >= 0) {
        write_thread_block(fd, self, context);
        sys::close(fd);
      }
      std::uint64_t writing = pack_request(self, request_writing);
      dump_request.compare_exchange_strong(writing, pack_request(self, request_answered));
    }
  } else {
    bool idle = false;
    if (dump_active.compare_exchange_strong(idle, true)) {
      coordinate_dump(sig, self, context);
      dump_active.store(false, std::memory_order_release);
    }
    // else: a dump is already running; this request is covered by it.
  }
  errno = saved_errno;
}

// The pid of the process whose agent state this is (set at install, and again in a forked
// child). A child made by vfork() or clone(CLONE_VM) shares this memory without a fork handler
// (GoogleTest's death tests chdir() in one, on a stack of a page or two, before they exec): there
// the raw getpid() differs, and the agent must do nothing.
std::atomic<long> agent_pid{0};

bool in_agent_process() noexcept { return ::syscall(SYS_getpid) == agent_pid.load(std::memory_order_relaxed); }

void after_fork_in_child() {
  agent_pid.store(::syscall(SYS_getpid), std::memory_order_relaxed);
  // The child has only the forking thread; state owned by the parent's other threads is void.
  crash_owner.store(0);
  dump_active.store(false);
  dump_request.store(0);
  if (!agent_active.load(std::memory_order_acquire)) return;
  // The parent's slot or phase file is the parent's: the child takes its own (the table's
  // mapping, shared, is the child's too).
  if (phase_map != nullptr) sys::munmap(phase_map, phase_file_bytes);
  phase_map = nullptr;
  open_phase_record();
  append_marker(marker_run);
}

// Records `dir` (made absolute) as the run directory. Returns 0, or the errno why it cannot be.
int adopt_run_dir(const char* dir) noexcept {
  path_string absolute;
  if (dir[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) return errno;
    absolute.str(cwd).str("/");
  }
  absolute.str(dir);
  // Room for "/stacks.<pid>" after the directory.
  if (absolute.overflowed() || absolute.size() + 32 >= sizeof(run_dir_path)) return ENAMETOOLONG;
  struct stat st {};
  if (::stat(absolute.c_str(), &st) != 0) return errno;
  if (!S_ISDIR(st.st_mode)) return ENOTDIR;
  std::memcpy(run_dir_path, absolute.c_str(), absolute.size() + 1);
  return 0;
}

// Where a process that stands away from its core home (protocol.h) is: RUN_DIR/cwd.PID names
// the directory, written whole under another name and renamed into place (the core keeper
// watches the run directory for the rename, then that directory for the core). Only when the
// directory changes, and never at a crash: no handler, no cost where the race is (DESIGN.md §8.2).
char recorded_cwd[PATH_MAX];
// A program that walks a tree (chdir into every directory) stops being followed past this many.
constexpr int max_cwd_records = 64;
std::atomic<int> cwd_records{0};

void place_core() noexcept {
  if (core_home_path[0] == '\0') return;
  char cwd[PATH_MAX];
  if (::syscall(SYS_getcwd, cwd, sizeof cwd) <= 0) return;
  if (std::strcmp(cwd, core_home_path) == 0 || std::strcmp(cwd, recorded_cwd) == 0) return;
  if (cwd_records.fetch_add(1, std::memory_order_relaxed) >= max_cwd_records) return;
  const pid_t pid = core::host_pid();
  path_string record;
  pid_file_path(record, cwd_file_prefix, pid);
  path_string part;
  part.str(record.c_str()).str(".part");
  if (record.overflowed() || part.overflowed()) return;
  const int fd = sys::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::size_t n = std::strlen(cwd);
  const bool written = sys::write(fd, cwd, n) == static_cast<ssize_t>(n);
  sys::close(fd);
  if (written && ::syscall(SYS_rename, part.c_str(), record.c_str()) == 0) std::memcpy(recorded_cwd, cwd, n + 1);
}

// FAULTLINE_AGENT_CORE_HOME, for crash mode off: an absolute path that fits, else none.
void read_core_home() noexcept {
  const char* home = std::getenv(core_home_env);
  core_home_path[0] = '\0';
  if (crash_reporting != crash_mode::off || home == nullptr || home[0] != '/') return;
  const std::size_t n = std::strlen(home);
  if (n >= sizeof core_home_path) return;
  std::memcpy(core_home_path, home, n + 1);
}

// The crash reporting the environment asks for: off, minimal, stop (with its channel, a pipe
// already open; without one, minimal) or, by default, the agent's full report.
void read_crash_mode() noexcept {
  const char* quiet = std::getenv(quiet_env);
  quiet_mode = quiet != nullptr && std::strcmp(quiet, "1") == 0;
  const char* mode = std::getenv(crash_mode_env);
  if (mode != nullptr && std::strcmp(mode, "off") == 0) {
    crash_reporting = crash_mode::off;
  } else if (mode != nullptr && std::strcmp(mode, "minimal") == 0) {
    crash_reporting = crash_mode::minimal;
  } else if (mode != nullptr && std::strcmp(mode, "stop") == 0) {
    crash_reporting = crash_mode::stop;
    const char* fd_text = std::getenv(crash_fd_env);
    char* end = nullptr;
    long fd = fd_text != nullptr ? std::strtol(fd_text, &end, 10) : -1;
    // Only a descriptor that is open and a pipe: anything else may be the program's own file.
    struct stat channel {};
    if (end != fd_text && end != nullptr && *end == '\0' && fd >= 0 && fd < INT_MAX &&
        ::fstat(static_cast<int>(fd), &channel) == 0 && S_ISFIFO(channel.st_mode)) {
      crash_channel_fd = static_cast<int>(fd);
    } else {
      crash_reporting = crash_mode::minimal;
    }
  }
}

// The unwinder, dladdr1 and the demangler are warmed so that any lazy binding or first-use
// set-up happens here rather than in a handler.
void warm_up_handlers() noexcept {
  void* warm[4];
  int warm_frames = unwind_frames(warm, 4);
  if (warm_frames > 0) (void)resolve_frame(reinterpret_cast<std::uintptr_t>(warm[0]), false);
#if FAULTLINE_AGENT_HAVE_DEMANGLER
  demangle_without_malloc("_Z1fv", [](const char*, std::size_t, void*) {}, nullptr);
#endif
}

// Puts back the crash handlers' previous actions for the first `count` crash signals.
void restore_crash_actions(int count) noexcept {
  for (int i = 0; i < count; ++i) sys::sigaction(crash_signals[i], &previous_actions[i], nullptr);
}

// Installs the crash handler (unless crash reporting is off) and the stack-dump handler.
// Returns 0, or the errno of the sigaction that failed, with every handler installed so far
// taken back.
int install_signal_handlers() noexcept {
  struct sigaction crash {};
  crash.sa_sigaction = &crash_handler;
  crash.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&crash.sa_mask);
  for (int sig : crash_signals) sigaddset(&crash.sa_mask, sig);
  sigaddset(&crash.sa_mask, stack_dump_signal());
  sigaddset(&crash.sa_mask, SIGPIPE);
  const int crash_handled = crash_reporting != crash_mode::off ? crash_signal_count : 0;
  for (int i = 0; i < crash_handled; ++i) {
    if (sys::sigaction(crash_signals[i], &crash, &previous_actions[i]) != 0) {
      int error = errno;
      restore_crash_actions(i);
      return error;
    }
  }
  struct sigaction dump {};
  dump.sa_sigaction = &dump_handler;
  // SA_RESTART: the dump must not make the program's restartable system calls fail with EINTR.
  dump.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&dump.sa_mask);
  if (sys::sigaction(stack_dump_signal(), &dump, nullptr) != 0) {
    int error = errno;
    restore_crash_actions(crash_handled);
    return error;
  }
  return 0;
}

install_result install_once() noexcept {
  const char* dir = std::getenv(run_dir_env);
  if (dir == nullptr || dir[0] == '\0') return {install_status::disabled, 0};
  if (int error = adopt_run_dir(dir); error != 0) return {install_status::failed, error};
  read_crash_mode();
  ssize_t exe_chars = ::readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);
  exe_path[exe_chars > 0 ? exe_chars : 0] = '\0';
  warm_up_handlers();
  prepare_thread();  // without an alternate stack the handlers still run, on the thread's stack
  if (int error = install_signal_handlers(); error != 0) return {install_status::failed, error};
  read_core_home();
  agent_pid.store(::syscall(SYS_getpid), std::memory_order_relaxed);
  place_core();
  ::pthread_atfork(nullptr, nullptr, &after_fork_in_child);

  map_phase_table();
  open_phase_record();
  agent_active.store(true, std::memory_order_release);
  append_marker(marker_run);
  return {install_status::installed, 0};
}

}  // namespace

install_result install() noexcept {
  int expected = install_idle;
  if (!install_progress.compare_exchange_strong(expected, install_running)) {
    while (install_progress.load(std::memory_order_acquire) != install_done) sleep_ms(1);
    return install_outcome;
  }
  install_outcome = install_once();
  install_progress.store(install_done, std::memory_order_release);
  return install_outcome;
}

bool installed() noexcept { return agent_active.load(std::memory_order_acquire); }

const char* run_dir() noexcept { return installed() ? run_dir_path : nullptr; }

long process_index() noexcept {
  if (!installed() || own_slot == nullptr || phase_table == nullptr) return -1;
  return static_cast<long>(own_slot - reinterpret_cast<phase_slot*>(phase_table + phase_slot_bytes));
}

bool record_late_cuda(const char* api, int result) noexcept {
  static std::atomic<unsigned> recorded{0};
  if (api == nullptr || !installed()) return false;
  int fd = open_pid_file(late_cuda_file_prefix, core::host_pid(), O_APPEND);
  if (fd < 0) return false;
  const bool framed = recorded.fetch_add(1, std::memory_order_relaxed) < late_cuda_framed_calls;
  {
    // Buffered: a block is written in as few write(2)s as its size allows.
    fd_writer out(fd);
    out.str("call ").str(api).chr(' ').dec(result).chr('\n');
    if (framed) {
      void* frames[max_frames];
      int count = unwind_frames(frames, max_frames);
      write_frames(out, frames, count, false);
      out.chr('\n');
    }
  }
  sys::close(fd);
  return true;
}

bool mark(const char* marker) noexcept {
  if (marker == nullptr || !installed()) return false;
  return append_marker(marker);
}

bool prepare_thread() noexcept {
  stack_t current{};
  if (::sigaltstack(nullptr, &current) != 0) return false;
  if ((current.ss_flags & SS_DISABLE) == 0 && current.ss_size >= alt_stack_bytes) return true;
  if ((current.ss_flags & SS_ONSTACK) != 0) return false;
  std::size_t guard = page_bytes();
  void* mapping = sys::mmap(nullptr, alt_stack_bytes + guard, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) return false;
  // Stacks grow down: the guard page below turns an overflow of the handler into a clean fault.
  sys::mprotect(mapping, guard, PROT_NONE);
  stack_t stack{};
  stack.ss_sp = static_cast<char*>(mapping) + guard;
  stack.ss_size = alt_stack_bytes;
  if (::sigaltstack(&stack, nullptr) != 0) {
    sys::munmap(mapping, alt_stack_bytes + guard);
    return false;
  }
  agent_stack_mapping = mapping;
  return true;
}

void working_directory_changed() noexcept {
  // Not in a vfork()/CLONE_VM child: place_core() wants kilobytes of stack and writes this
  // memory, which is the parent's there (a death test's child died of SIGSEGV in it).
  if (installed() && in_agent_process()) place_core();
}

void release_thread() noexcept {
  if (agent_stack_mapping == nullptr) return;
  stack_t current{};
  if (::sigaltstack(nullptr, &current) != 0 || (current.ss_flags & SS_ONSTACK) != 0) return;
  std::size_t guard = page_bytes();
  if (current.ss_sp == static_cast<char*>(agent_stack_mapping) + guard) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    if (::sigaltstack(&off, nullptr) != 0) return;
  }
  sys::munmap(agent_stack_mapping, alt_stack_bytes + guard);
  agent_stack_mapping = nullptr;
}

}  // namespace faultline::agent
