#include "harness/run/dwfl_stacks.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <signal.h>
#include <sys/procfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

// ---- Handles --------------------------------------------------------------------------------

class file_handle {
 public:
  explicit file_handle(int fd) noexcept : fd_(fd) {}
  file_handle(const file_handle&) = delete;
  file_handle& operator=(const file_handle&) = delete;
  ~file_handle() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

struct elf_closer {
  void operator()(Elf* e) const noexcept { elf_end(e); }
};
struct dwfl_closer {
  void operator()(Dwfl* d) const noexcept { dwfl_end(d); }
};
using elf_handle = std::unique_ptr<Elf, elf_closer>;
using dwfl_handle = std::unique_ptr<Dwfl, dwfl_closer>;

std::string dwfl_error() {
  const char* m = dwfl_errmsg(-1);
  return m ? m : "unknown libdwfl error";
}

void init_libelf() {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
}

core::result<elf_handle> open_elf(int fd, const fs::path& path) {
  init_libelf();
  elf_handle elf(elf_begin(fd, ELF_C_READ_MMAP, nullptr));
  if (!elf) return core::status(core::errc::invalid_argument, path.string() + ": " + elf_errmsg(-1));
  return elf;
}

// ---- Core notes -----------------------------------------------------------------------------

#if defined(__x86_64__)
constexpr int native_machine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int native_machine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr int native_machine = EM_PPC64;
#else
constexpr int native_machine = -1;  // not checked
#endif
constexpr unsigned char native_class = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;

std::string elf_type_name(unsigned type) {
  switch (type) {
    case ET_NONE: return "NONE";
    case ET_REL: return "REL";
    case ET_EXEC: return "EXEC";
    case ET_DYN: return "DYN";
    default: return std::to_string(type);
  }
}

std::string bounded_string(const char* s, std::size_t n) {
  std::string out(s, ::strnlen(s, n));
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The process and crashing thread a core is of, from its CORE notes. The structures are this
// machine's (sys/procfs.h), hence the architecture check: the harness reads its own runs' cores.
core::result<core_identity> identity_of(Elf* elf, const fs::path& path) {
  const std::string name = path.string();
  if (elf_kind(elf) != ELF_K_ELF) return core::status(core::errc::invalid_argument, name + " is not an ELF file");
  GElf_Ehdr eh{};
  if (gelf_getehdr(elf, &eh) == nullptr)
    return core::status(core::errc::invalid_argument, name + ": " + elf_errmsg(-1));
  if (eh.e_type != ET_CORE)
    return core::status(core::errc::invalid_argument,
                        name + " is not a core file (ELF type " + elf_type_name(eh.e_type) + ")");
  if (eh.e_ident[EI_CLASS] != native_class || (native_machine >= 0 && eh.e_machine != native_machine))
    return core::status(core::errc::invalid_argument,
                        name + " is a core of another architecture (ELF machine " + std::to_string(eh.e_machine) + ")");
  std::size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return core::status(core::errc::invalid_argument, name + ": " + elf_errmsg(-1));

  core_identity id;
  bool have_status = false;
  for (std::size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph{};
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_NOTE) continue;
    Elf_Data* data = elf_getdata_rawchunk(elf, static_cast<int64_t>(ph.p_offset), ph.p_filesz,
                                          ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
    if (data == nullptr) continue;
    const char* base = static_cast<const char*>(data->d_buf);
    GElf_Nhdr nh{};
    std::size_t name_at = 0;
    std::size_t desc_at = 0;
    for (std::size_t at = 0, next = 0; at < data->d_size && (next = gelf_getnote(data, at, &nh, &name_at, &desc_at)) > 0;
         at = next) {
      if (nh.n_namesz != sizeof "CORE" || std::memcmp(base + name_at, "CORE", sizeof "CORE") != 0) continue;
      const char* desc = base + desc_at;
      if (nh.n_type == NT_PRSTATUS && !have_status &&
          nh.n_descsz >= offsetof(elf_prstatus, pr_pid) + sizeof(elf_prstatus::pr_pid)) {
        elf_prstatus st{};
        std::memcpy(&st, desc, std::min<std::size_t>(nh.n_descsz, sizeof st));
        id.crashed_tid = st.pr_pid;
        id.signal = st.pr_cursig;
        have_status = true;
      } else if (nh.n_type == NT_PRPSINFO && nh.n_descsz >= sizeof(elf_prpsinfo)) {
        elf_prpsinfo ps{};
        std::memcpy(&ps, desc, sizeof ps);
        id.pid = ps.pr_pid;
        id.group = ps.pr_pgrp;
        id.command = bounded_string(ps.pr_fname, sizeof ps.pr_fname);
        id.arguments = bounded_string(ps.pr_psargs, sizeof ps.pr_psargs);
      }
    }
  }
  if (!have_status) return core::status(core::errc::invalid_argument, name + " has no NT_PRSTATUS note");
  return id;
}

// ---- libdwfl callbacks ----------------------------------------------------------------------

// The program a core is of, as the caller named it: for find_core_elf, which libdwfl calls on
// the calling thread (core reads are serialised, and this is set only around one).
thread_local const char* core_executable = nullptr;

// A module of a core that its NT_FILE note did not name, or whose file there has another build
// ID (libdwfl opened those itself): only the program named by the caller is offered, for the
// main module ("[exe]"/"[pie]" when unnamed) or a module of the same file name; libdwfl checks
// its build ID. Never debuginfod (dwfl_build_id_find_elf would ask it when DEBUGINFOD_URLS is
// set, and wait for the network).
int find_core_elf(Dwfl_Module*, void**, const char* module_name, Dwarf_Addr, char** file_name, Elf** elfp) {
  *elfp = nullptr;
  const char* exe = core_executable;
  if (exe == nullptr || module_name == nullptr) return -1;
  if (module_name[0] != '[' && fs::path(module_name).filename() != fs::path(exe).filename()) return -1;
  const int fd = ::open(exe, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  *file_name = ::strdup(exe);  // libdwfl frees it
  return fd;
}

// Separate debug info installed on this machine (Debian's -dbg/-dbgsym packages), by build ID.
// It gives stripped libraries their full symbol table; nothing else is looked up.
int find_local_debuginfo(Dwfl_Module* mod, void**, const char*, Dwarf_Addr, const char*, const char*, GElf_Word,
                         char** debuginfo_file_name) {
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  const int len = dwfl_module_build_id(mod, &bits, &vaddr);
  if (len < 2) return -1;
  std::string path = "/usr/lib/debug/.build-id/";
  for (int i = 0; i < len; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", bits[i]);
    path += hex;
    if (i == 0) path += '/';
  }
  path += ".debug";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  *debuginfo_file_name = ::strdup(path.c_str());
  return fd;
}

char* no_debuginfo_path = nullptr;
const Dwfl_Callbacks core_callbacks = {find_core_elf, find_local_debuginfo, nullptr, &no_debuginfo_path};
const Dwfl_Callbacks process_callbacks = {dwfl_linux_proc_find_elf, find_local_debuginfo, nullptr,
                                          &no_debuginfo_path};

// libdwfl 0.188's core memory reader keeps the core's program-header count in a static.
std::mutex core_mutex;

// ---- Symbols --------------------------------------------------------------------------------

std::string demangled(std::string_view name) {
  name = name.substr(0, name.find('@'));  // a symbol version: "clock_nanosleep@GLIBC_2.2.5"
  std::string plain(name);
  if (plain.rfind("_Z", 0) != 0) return plain;
  int status = 0;
  char* d = abi::__cxa_demangle(plain.c_str(), nullptr, nullptr, &status);
  if (status == 0 && d != nullptr) plain = d;
  std::free(d);
  return plain;
}

// A DWARF function's name: its linkage name demangled (qualified, as the symbol table has it),
// else its plain name; through DW_AT_abstract_origin and DW_AT_specification.
std::string die_function_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
  if (linkage == nullptr) linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
  if (linkage != nullptr) return demangled(linkage);
  const char* name = dwarf_diename(die);
  return name != nullptr ? name : "";
}

// Whether the module's own file has DWARF (a program built with -g), not a separate debug file.
bool has_own_dwarf(Dwfl_Module* mod) {
  Dwarf_Addr bias = 0;
  Elf* elf = dwfl_module_getelf(mod, &bias);
  std::size_t names = 0;
  if (elf == nullptr || elf_getshdrstrndx(elf, &names) != 0) return false;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh{};
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type == SHT_NOBITS) continue;
    const char* name = elf_strptr(elf, names, sh.sh_name);
    if (name != nullptr && std::strcmp(name, ".debug_info") == 0) return true;
  }
  return false;
}

// The functions inlined at `at`, innermost first, where the module's file has DWARF: each is a
// frame of its own in gdb's and eu-stack -i's view, and a signature should not depend on the
// tool. Separate debug files (a distribution's libc) are not loaded for this: their inlined
// functions say nothing about the program, and decompressing their DWARF took most of a read.
std::vector<std::string> inlined_functions(Dwfl_Module* mod, Dwarf_Addr at) {
  std::vector<std::string> out;
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = dwfl_module_addrdie(mod, at, &bias);
  if (cu == nullptr) return out;
  Dwarf_Die* scopes = nullptr;
  const int n = dwarf_getscopes(cu, at - bias, &scopes);
  for (int i = 0; i < n; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram) break;  // the function the symbol table names
    if (tag == DW_TAG_inlined_subroutine) out.push_back(die_function_name(&scopes[i]));
  }
  std::free(scopes);
  return out;
}

// The module's file: the path it was reported under (a core's NT_FILE, /proc/PID/maps), else
// the file libdwfl found for it ("[exe]" in a core without NT_FILE), else its name ("[vdso]").
std::string module_path(Dwfl_Module* mod) {
  const char* mainfile = nullptr;
  const char* name = dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, &mainfile, nullptr);
  if (name != nullptr && name[0] == '/') return name;
  if (mainfile != nullptr && mainfile[0] != '\0') return mainfile;
  return name != nullptr ? name : "";
}

// "#N  0x00007f.. NAME - MODULE" as eu-stack -m prints it.
void append_frame_line(std::string& out, std::size_t nr, Dwarf_Addr pc, const std::string& name,
                       const std::string& module) {
  char head[48];
  std::snprintf(head, sizeof head, "#%-2zu 0x%016llx", nr, static_cast<unsigned long long>(pc));
  out += head;
  if (!name.empty()) out += " " + name;
  if (!module.empty()) out += " - " + module;
  out += '\n';
}

// ---- Unwinding ------------------------------------------------------------------------------

struct raw_frame {
  Dwarf_Addr pc = 0;
  bool activation = false;
};

struct frame_walk {
  std::vector<raw_frame> frames;
  std::size_t max = 0;
};

int on_frame(Dwfl_Frame* state, void* arg) {
  auto* walk = static_cast<frame_walk*>(arg);
  raw_frame f;
  if (!dwfl_frame_pc(state, &f.pc, &f.activation)) return -1;
  walk->frames.push_back(f);
  return walk->frames.size() >= walk->max ? DWARF_CB_ABORT : DWARF_CB_OK;
}

struct reading {
  Dwfl* dwfl = nullptr;
  std::map<Dwfl_Module*, bool> own_dwarf;  // has_own_dwarf, per module
  const dwfl_limits* limits = nullptr;
  std::string text;
  std::size_t threads = 0;
  std::size_t frames = 0;
  std::size_t more_threads = 0;  // past limits->max_threads
  std::string first_error;       // of a thread that gave no frame
};

int on_thread(Dwfl_Thread* thread, void* arg) {
  auto* r = static_cast<reading*>(arg);
  if (r->threads >= r->limits->max_threads) {
    ++r->more_threads;  // counted, not unwound (a live thread is attached only when unwound)
    return DWARF_CB_OK;
  }
  ++r->threads;
  const pid_t tid = dwfl_thread_tid(thread);
  frame_walk walk;
  walk.max = r->limits->max_frames;
  const int rc = dwfl_thread_getframes(thread, on_frame, &walk);
  const std::string error = rc == -1 ? dwfl_error() : std::string();

  r->text += "TID " + std::to_string(tid) + ":\n";
  std::size_t nr = 0;
  for (const raw_frame& f : walk.frames) {
    if (nr >= r->limits->max_frames) break;
    // A return address points after its call: look it up inside the call.
    const Dwarf_Addr at = f.pc - (f.activation ? 0 : 1);
    std::string name;
    std::string module;
    std::vector<std::string> inlined;
    if (Dwfl_Module* mod = dwfl_addrmodule(r->dwfl, at)) {
      GElf_Off offset = 0;
      GElf_Sym sym{};
      if (const char* n = dwfl_module_addrinfo(mod, at, &offset, &sym, nullptr, nullptr, nullptr)) name = demangled(n);
      module = module_path(mod);
      auto known = r->own_dwarf.find(mod);
      if (known == r->own_dwarf.end()) known = r->own_dwarf.emplace(mod, has_own_dwarf(mod)).first;
      if (known->second) inlined = inlined_functions(mod, at);
    }
    for (const std::string& in : inlined)
      if (nr < r->limits->max_frames) append_frame_line(r->text, nr++, f.pc, in, module);
    if (nr < r->limits->max_frames) append_frame_line(r->text, nr++, f.pc, name, module);
  }
  r->frames += nr;
  if (nr >= r->limits->max_frames)
    r->text += "(stopped after " + std::to_string(nr) + " frames)\n";
  else if (!error.empty())
    r->text += "(unwinding stopped: " + error + ")\n";
  if (walk.frames.empty() && r->first_error.empty())
    r->first_error = "thread " + std::to_string(tid) + ": " + (error.empty() ? "no frames" : error);
  return DWARF_CB_OK;
}

// Unwinds every thread of an attached Dwfl into `r`; an error when libdwfl lists no thread.
core::status read_threads(Dwfl* dwfl, reading& r) {
  r.dwfl = dwfl;
  if (dwfl_getthreads(dwfl, on_thread, &r) == -1) {
    const std::string error = dwfl_error();
    if (r.threads == 0) return core::status(core::errc::unavailable, "libdwfl lists no thread: " + error);
    r.text += "(listing threads stopped: " + error + ")\n";
  }
  if (r.more_threads > 0) r.text += "(" + std::to_string(r.more_threads) + " more threads not shown)\n";
  return {};
}

core::result<std::string> read_live(pid_t pid, const dwfl_limits& limits) {
  const std::string what = "process " + std::to_string(pid);
  dwfl_handle dwfl(dwfl_begin(&process_callbacks));
  if (!dwfl) return core::status(core::errc::unavailable, "dwfl_begin: " + dwfl_error());
  int err = dwfl_linux_proc_report(dwfl.get(), pid);
  if (err < 0) return core::status(core::errc::unavailable, "libdwfl cannot list the modules of " + what + ": " + dwfl_error());
  if (err == ENOENT || err == ESRCH) return core::status(core::errc::not_found, "no " + what);
  if (err > 0) return core::status(core::errc::unavailable, core::status::from_errno(err, "reading the maps of " + what).message());
  if (dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0)
    return core::status(core::errc::unavailable, "dwfl_report_end: " + dwfl_error());
  err = dwfl_linux_proc_attach(dwfl.get(), pid, false);
  if (err < 0) return core::status(core::errc::unavailable, "libdwfl cannot attach to " + what + ": " + dwfl_error());
  if (err == ENOENT || err == ESRCH) return core::status(core::errc::not_found, "no " + what);
  if (err > 0) return core::status(core::errc::unavailable, core::status::from_errno(err, "attaching to " + what).message());
  reading r;
  r.limits = &limits;
  r.text = "PID " + std::to_string(pid) + " - process\n";
  if (auto s = read_threads(dwfl.get(), r); !s) return core::status(s.code(), what + ": " + s.message());
  if (r.frames == 0) return core::status(core::errc::unavailable, "libdwfl read no frame of " + what + ": " + r.first_error);
  return std::move(r.text);
}

}  // namespace

core::result<core_identity> read_core_identity(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return core::status::from_errno(errno, "open " + path.string());
  file_handle file(fd);
  auto elf = open_elf(file.get(), path);
  if (!elf) return elf.error();
  return identity_of(elf->get(), path);
}

core::result<core_stacks> read_core_stacks(const fs::path& path, const fs::path& executable,
                                           const dwfl_limits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return core::status::from_errno(errno, "open " + path.string());
  file_handle file(fd);
  auto elf = open_elf(file.get(), path);
  if (!elf) return elf.error();
  auto id = identity_of(elf->get(), path);
  if (!id) return id.error();

  std::lock_guard lock(core_mutex);
  const char* exe = executable.empty() ? nullptr : executable.c_str();
  core_executable = exe;
  struct reset_executable {
    ~reset_executable() { core_executable = nullptr; }
  } reset;
  dwfl_handle dwfl(dwfl_begin(&core_callbacks));  // ended before the core's Elf
  if (!dwfl) return core::status(core::errc::unavailable, "dwfl_begin: " + dwfl_error());
  const std::string what = "core " + path.string();
  if (dwfl_core_file_report(dwfl.get(), elf->get(), exe) < 0)
    return core::status(core::errc::unavailable, "libdwfl cannot read the modules of " + what + ": " + dwfl_error());
  if (dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0)
    return core::status(core::errc::unavailable, "dwfl_report_end: " + dwfl_error());
  if (dwfl_core_file_attach(dwfl.get(), elf->get()) < 0)
    return core::status(core::errc::unavailable, "libdwfl cannot read the threads of " + what + ": " + dwfl_error());

  reading r;
  r.limits = &limits;
  r.text = "PID " + std::to_string(id->pid) + " - core\n";
  if (auto s = read_threads(dwfl.get(), r); !s) return core::status(s.code(), what + ": " + s.message());
  core_stacks out;
  out.identity = std::move(*id);
  out.threads = r.threads;
  out.frames = r.frames;
  out.text = std::move(r.text);
  return out;
}

core::result<std::string> read_process_stacks(pid_t pid, const dwfl_limits& limits) {
  if (pid <= 0) return core::status(core::errc::invalid_argument, "no process " + std::to_string(pid));
  if (::kill(pid, 0) != 0 && errno == ESRCH) return core::status(core::errc::not_found, "no process " + std::to_string(pid));
  // On a thread of its own, which is the tracer while it reads: an abandoned read (past the
  // timeout) keeps only that thread, which ends once the process stops or dies.
  auto work = std::make_shared<std::packaged_task<core::result<std::string>()>>(
      [pid, limits] { return read_live(pid, limits); });
  auto done = work->get_future();
  std::thread([work] { (*work)(); }).detach();
  if (done.wait_for(limits.timeout) != std::future_status::ready)
    return core::status(core::errc::timeout, "libdwfl did not read process " + std::to_string(pid) + " within " +
                                                 std::to_string(limits.timeout.count()) +
                                                 " ms (a thread in uninterruptible sleep?)");
  return done.get();
}

}  // namespace faultline::harness
