#include "harness/run/elf_functions.h"

#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <sys/stat.h>
#include <cstring>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace faultline::harness {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t page = 4096;  // the loader maps a module from its first segment's page

struct function_table {
  std::uint64_t base = 0;                                   // first PT_LOAD's vaddr, page aligned
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // [start, end), sorted by start
};

// Function symbols of one symbol-table section, as [start, end) spans (end 0: sizeless).
void read_functions(Elf_Scn* scn, const GElf_Shdr& shdr, std::vector<std::pair<std::uint64_t, std::uint64_t>>& out) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr || shdr.sh_entsize == 0) return;
  const std::size_t count = shdr.sh_size / shdr.sh_entsize;
  for (std::size_t i = 0; i < count; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
    const int type = GELF_ST_TYPE(sym.st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
    out.emplace_back(sym.st_value, sym.st_size == 0 ? 0 : sym.st_value + sym.st_size);
  }
}

std::shared_ptr<const function_table> load(const fs::path& module) {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
  const int fd = ::open(module.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  auto table = std::make_shared<function_table>();
  bool based = false;
  if (elf != nullptr && elf_kind(elf) == ELF_K_ELF) {
    std::size_t phnum = 0;
    if (elf_getphdrnum(elf, &phnum) == 0) {
      for (std::size_t i = 0; i < phnum && !based; ++i) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, static_cast<int>(i), &ph) != nullptr && ph.p_type == PT_LOAD) {
          table->base = ph.p_vaddr & ~(page - 1);
          based = true;
        }
      }
    }
    // .symtab when there is one (every function, local ones too), else .dynsym (exported ones).
    std::vector<std::pair<std::uint64_t, std::uint64_t>> symtab, dynsym;
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr) continue;
      if (shdr.sh_type == SHT_SYMTAB) read_functions(scn, shdr, symtab);
      if (shdr.sh_type == SHT_DYNSYM) read_functions(scn, shdr, dynsym);
    }
    table->spans = symtab.empty() ? std::move(dynsym) : std::move(symtab);
  }
  if (elf != nullptr) elf_end(elf);
  ::close(fd);
  if (!based || table->spans.empty()) return nullptr;
  auto& s = table->spans;
  std::sort(s.begin(), s.end());
  // A sizeless symbol covers up to the next symbol's start (and nothing past the last one).
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i].second != 0) continue;
    std::size_t j = i + 1;
    while (j < s.size() && s[j].first == s[i].first) ++j;
    s[i].second = j < s.size() ? s[j].first : s[i].first + 1;
  }
  return table;
}

}  // namespace

std::optional<bool> function_covers(const fs::path& module, std::uint64_t offset) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const function_table>> cache;
  std::shared_ptr<const function_table> table;
  {
    std::lock_guard lock(mu);
    auto it = cache.find(module.string());
    if (it == cache.end()) it = cache.emplace(module.string(), load(module)).first;
    table = it->second;
  }
  if (!table) return std::nullopt;
  const std::uint64_t address = table->base + offset;
  const auto& s = table->spans;
  // The spans starting at or before the address; any of them may cover it (nested symbols and
  // aliases overlap), so look back over those whose start is the same or earlier.
  auto it = std::upper_bound(s.begin(), s.end(), std::make_pair(address, UINT64_MAX));
  for (auto at = it; at != s.begin();) {
    --at;
    if (address < at->second) return true;
    if (address - at->first > (std::uint64_t{1} << 24)) break;  // no function is 16 MiB long
  }
  return false;
}

namespace {

std::string env_value(const std::vector<std::string>& env, std::string_view key) {
  for (const auto& kv : env) {
    if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=') return kv.substr(key.size() + 1);
  }
  return {};
}

std::vector<std::string> split(const std::string& text, std::string_view separators) {
  std::vector<std::string> out;
  std::string part;
  for (char c : text) {
    if (separators.find(c) != std::string_view::npos) {
      if (!part.empty()) out.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  if (!part.empty()) out.push_back(part);
  return out;
}

// One ELF file's function names, and what it needs of the loader.
struct elf_facts {
  std::vector<std::string> needed;
  std::vector<std::string> rpath, runpath;
};

std::optional<elf_facts> read_elf(const fs::path& path, std::set<std::string>& names, bool debug_file = false);

// Where the separate debug file of `elf` (read from `path`) may be, in the order gdb looks (as the
// lock/ filters do, faults/preload/lock_points.cc): its .gnu_debuglink beside it, in .debug/,
// under /usr/lib/debug/DIR/, then /usr/lib/debug/.build-id/NN/REST.debug.
std::vector<fs::path> debug_candidates(Elf* elf, const fs::path& path) {
  std::vector<fs::path> out;
  std::size_t names_index = 0;
  if (elf_getshdrstrndx(elf, &names_index) != 0) return out;
  const fs::path dir = fs::absolute(path).parent_path();
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    const char* name = elf_strptr(elf, names_index, shdr.sh_name);
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (name == nullptr || data == nullptr || data->d_buf == nullptr) continue;
    if (std::strcmp(name, ".gnu_debuglink") == 0 && data->d_size > 1) {
      const auto* link = static_cast<const char*>(data->d_buf);
      if (::strnlen(link, data->d_size) == data->d_size) continue;
      out.push_back(dir / link);
      out.push_back(dir / ".debug" / link);
      out.push_back(fs::path("/usr/lib/debug" + dir.string()) / link);
    } else if (shdr.sh_type == SHT_NOTE) {
      GElf_Nhdr note;
      std::size_t offset = 0, name_at = 0, desc_at = 0;
      while ((offset = gelf_getnote(data, offset, &note, &name_at, &desc_at)) > 0) {
        if (note.n_type != NT_GNU_BUILD_ID || note.n_namesz != 4 || note.n_descsz < 2) continue;
        const auto* id = static_cast<const unsigned char*>(data->d_buf) + desc_at;
        std::string hex;
        constexpr char digits[] = "0123456789abcdef";
        for (std::size_t k = 0; k < note.n_descsz; ++k) {
          hex += digits[id[k] >> 4];
          hex += digits[id[k] & 15];
          if (k == 0) hex += '/';
        }
        out.emplace_back("/usr/lib/debug/.build-id/" + hex + ".debug");
      }
    }
  }
  return out;
}

// Reads `path`'s function names into `names` (a debug file: its .symtab only); nullopt when it is
// not a readable ELF file.
std::optional<elf_facts> read_elf(const fs::path& path, std::set<std::string>& names, bool debug_file) {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  std::optional<elf_facts> out;
  if (elf != nullptr && elf_kind(elf) == ELF_K_ELF) {
    out.emplace();
    const fs::path origin = fs::absolute(path).parent_path();
    bool had_symtab = false;
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr || shdr.sh_entsize == 0) continue;
      const std::size_t count = shdr.sh_size / shdr.sh_entsize;
      if (data->d_buf == nullptr) continue;  // SHT_NOBITS: a debug file's copy of what it left out
      if (shdr.sh_type == SHT_SYMTAB) had_symtab = true;
      if (debug_file && shdr.sh_type != SHT_SYMTAB) continue;
      if (shdr.sh_type == SHT_SYMTAB || shdr.sh_type == SHT_DYNSYM) {
        for (std::size_t i = 0; i < count; ++i) {
          GElf_Sym sym;
          if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
          const int type = GELF_ST_TYPE(sym.st_info);
          if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF) continue;
          if (const char* n = elf_strptr(elf, shdr.sh_link, sym.st_name); n != nullptr && *n != '\0') names.insert(n);
        }
      } else if (shdr.sh_type == SHT_DYNAMIC) {
        for (std::size_t i = 0; i < count; ++i) {
          GElf_Dyn dyn;
          if (gelf_getdyn(data, static_cast<int>(i), &dyn) == nullptr) continue;
          if (dyn.d_tag != DT_NEEDED && dyn.d_tag != DT_RPATH && dyn.d_tag != DT_RUNPATH) continue;
          const char* v = elf_strptr(elf, shdr.sh_link, dyn.d_un.d_val);
          if (v == nullptr) continue;
          if (dyn.d_tag == DT_NEEDED) {
            out->needed.emplace_back(v);
            continue;
          }
          auto& dirs = dyn.d_tag == DT_RPATH ? out->rpath : out->runpath;
          for (std::string dir : split(v, ":")) {
            for (const char* token : {"$ORIGIN", "${ORIGIN}"}) {
              if (auto at = dir.find(token); at != std::string::npos) dir.replace(at, std::strlen(token), origin.string());
            }
            dirs.push_back(dir);
          }
        }
      }
    }
    // A stripped file: the functions its .symtab had are in its separate debug file, if any.
    if (!had_symtab && !debug_file) {
      std::error_code ec;
      for (const auto& candidate : debug_candidates(elf, path)) {
        if (fs::is_regular_file(candidate, ec) && read_elf(candidate, names, true)) break;
      }
    }
  }
  if (elf != nullptr) elf_end(elf);
  ::close(fd);
  return out;
}

std::vector<std::string> system_library_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (fs::directory_iterator it("/etc/ld.so.conf.d", ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".conf") continue;
    std::ifstream in(it->path());
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] == '/') dirs.push_back(line.substr(0, line.find_first_of(" \t#")));
    }
  }
  for (const char* d : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"})
    dirs.emplace_back(d);
  return dirs;
}

}  // namespace

namespace {

// What program_function_names and program_modules share: the names into `names`, the files
// read into `modules`. False where nothing can be said (see program_function_names).
bool read_program(const std::string& argv0, const std::vector<std::string>& env, std::set<std::string>& names,
                  std::vector<fs::path>& modules) {
  fs::path program = argv0;
  std::error_code ec;
  if (argv0.find('/') == std::string::npos) {
    program.clear();
    for (const auto& dir : split(env_value(env, "PATH"), ":")) {
      const fs::path p = fs::path(dir) / argv0;
      if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) {
        program = p;
        break;
      }
    }
    if (program.empty()) return false;
  }
  auto top = read_elf(program, names);
  if (!top) return false;
  modules.push_back(program);
  const std::vector<std::string> library_path = split(env_value(env, "LD_LIBRARY_PATH"), ":;");
  const std::vector<std::string> system = system_library_dirs();
  std::set<std::string> seen;
  bool complete = true;
  // (file to read, the facts of the object that needs it)
  std::vector<std::pair<std::string, elf_facts>> queue;
  for (const auto& p : split(env_value(env, "LD_PRELOAD"), ": ")) queue.emplace_back(p, *top);
  for (const auto& n : top->needed) queue.emplace_back(n, *top);
  while (!queue.empty() && complete) {
    auto [name, parent] = std::move(queue.back());
    queue.pop_back();
    if (!seen.insert(name).second) continue;
    std::vector<std::string> dirs;
    if (name.find('/') == std::string::npos) {
      if (parent.runpath.empty()) dirs.insert(dirs.end(), parent.rpath.begin(), parent.rpath.end());
      dirs.insert(dirs.end(), library_path.begin(), library_path.end());
      dirs.insert(dirs.end(), parent.runpath.begin(), parent.runpath.end());
      dirs.insert(dirs.end(), system.begin(), system.end());
    } else {
      dirs.emplace_back();
    }
    bool found = false;
    for (const auto& dir : dirs) {
      const fs::path p = dir.empty() ? fs::path(name) : fs::path(dir) / name;
      if (!fs::is_regular_file(p, ec)) continue;
      auto facts = read_elf(p, names);
      if (!facts) continue;
      modules.push_back(p);
      for (const auto& n : facts->needed) queue.emplace_back(n, *facts);
      found = true;
      break;
    }
    if (!found && name.find("ld-linux") == std::string::npos && name.find("linux-vdso") == std::string::npos) complete = false;
  }
  return complete;
}

}  // namespace

std::optional<std::set<std::string>> program_function_names(const std::string& argv0, const std::vector<std::string>& env) {
  std::set<std::string> names;
  std::vector<fs::path> modules;
  if (!read_program(argv0, env, names, modules)) return std::nullopt;
  return names;
}

std::optional<std::vector<fs::path>> program_modules(const std::string& argv0, const std::vector<std::string>& env) {
  std::set<std::string> names;
  std::vector<fs::path> modules;
  if (!read_program(argv0, env, names, modules)) return std::nullopt;
  return modules;
}

namespace {

// A DIE's function name as .symtab would have it: its linkage name, else its name (following
// DW_AT_abstract_origin and DW_AT_specification).
std::string symtab_name_of(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
  if (name == nullptr) name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
  return name != nullptr ? name : "";
}

void walk_inlined(Dwarf_Die* parent, const std::string& caller, const fs::path& module,
                  const std::function<bool(std::string_view)>& wanted, std::vector<inlined_site>& out) {
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return;
  do {
    const int tag = dwarf_tag(&child);
    if (tag == DW_TAG_subprogram) {
      walk_inlined(&child, symtab_name_of(&child), module, wanted, out);
      continue;
    }
    if (tag == DW_TAG_inlined_subroutine) {
      Dwarf_Attribute attr;
      Dwarf_Die origin;
      if (dwarf_attr(&child, DW_AT_abstract_origin, &attr) != nullptr && dwarf_formref_die(&attr, &origin) != nullptr) {
        if (std::string name = symtab_name_of(&origin); !name.empty() && wanted(name)) {
          inlined_site site{name, caller, module, 0, {}};
          Dwarf_Addr base = 0, low = 0, high = 0;
          for (std::ptrdiff_t at = 0; (at = dwarf_ranges(&child, at, &base, &low, &high)) > 0;) {
            if (low < high) site.ranges.emplace_back(low, high);
          }
          Dwarf_Addr entry = 0;
          if (dwarf_entrypc(&child, &entry) == 0) site.entry = entry;
          else if (!site.ranges.empty()) site.entry = site.ranges.front().first;
          if (!site.ranges.empty()) out.push_back(std::move(site));
        }
      }
    }
    walk_inlined(&child, caller, module, wanted, out);  // nested inlining, lexical blocks, namespaces
  } while (dwarf_siblingof(&child, &child) == 0);
}

// Whether the ELF file has a .debug_info section with contents.
bool has_debug_info(Elf* elf) {
  std::size_t names_index = 0;
  if (elf_getshdrstrndx(elf, &names_index) != 0) return false;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS) continue;
    const char* name = elf_strptr(elf, names_index, shdr.sh_name);
    if (name != nullptr && (std::strcmp(name, ".debug_info") == 0 || std::strcmp(name, ".zdebug_info") == 0)) return true;
  }
  return false;
}

// The inlined sites of one file that has DWARF; false when it has none.
bool read_inlined(const fs::path& file, const fs::path& module, const std::function<bool(std::string_view)>& wanted,
                  std::vector<inlined_site>& out) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  bool read = false;
  if (elf != nullptr && elf_kind(elf) == ELF_K_ELF && has_debug_info(elf)) {
    if (Dwarf* dw = dwarf_begin_elf(elf, DWARF_C_READ, nullptr)) {
      read = true;
      Dwarf_Off offset = 0, next = 0;
      std::size_t header = 0;
      while (dwarf_nextcu(dw, offset, &next, &header, nullptr, nullptr, nullptr) == 0) {
        Dwarf_Die cu;
        if (dwarf_offdie(dw, offset + header, &cu) != nullptr) walk_inlined(&cu, "", module, wanted, out);
        offset = next;
      }
      dwarf_end(dw);
    }
  }
  if (elf != nullptr) elf_end(elf);
  ::close(fd);
  return read;
}

}  // namespace

inlined_copies find_inlined(const std::vector<fs::path>& modules, const std::function<bool(std::string_view)>& wanted) {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
  inlined_copies found;
  std::error_code ec;
  for (const auto& module : modules) {
    if (read_inlined(module, module, wanted, found.sites)) {
      found.with_dwarf.push_back(module);
      continue;
    }
    // Stripped: the DWARF may be in its separate debug file (the addresses are the module's).
    const int fd = ::open(module.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::vector<fs::path> candidates;
    if (Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr)) {
      if (elf_kind(elf) == ELF_K_ELF) candidates = debug_candidates(elf, module);
      elf_end(elf);
    }
    ::close(fd);
    for (const auto& c : candidates) {
      if (fs::is_regular_file(c, ec) && read_inlined(c, module, wanted, found.sites)) {
        found.with_dwarf.push_back(module);
        break;
      }
    }
  }
  return found;
}

std::vector<std::string> functions_calling(const fs::path& module, const std::set<std::string>& callees) {
  static std::once_flag once;
  std::call_once(once, [] { elf_version(EV_CURRENT); });
  std::set<std::string> found;
  const int fd = ::open(module.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (elf != nullptr && elf_kind(elf) == ELF_K_ELF) {
    std::size_t names_index = 0;
    elf_getshdrstrndx(elf, &names_index);
    // The GOT slots bound to a callee (.rela.plt's JUMP_SLOT, .rela.dyn's GLOB_DAT), the PLT
    // entries that jump through them, and the loaded code, by address.
    std::set<std::uint64_t> slots, entries;
    struct code {
      std::uint64_t address;
      const unsigned char* bytes;
      std::size_t size;
    };
    std::vector<code> sections;
    std::vector<std::pair<std::string, std::pair<std::uint64_t, std::uint64_t>>> functions;
    bool symtab = false;
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr || data->d_buf == nullptr) continue;
      if (shdr.sh_type == SHT_RELA) {
        Elf_Scn* symbols = elf_getscn(elf, shdr.sh_link);
        GElf_Shdr symbols_header;
        Elf_Data* symbol_data = symbols != nullptr ? elf_getdata(symbols, nullptr) : nullptr;
        if (symbol_data == nullptr || gelf_getshdr(symbols, &symbols_header) == nullptr || shdr.sh_entsize == 0) continue;
        for (std::size_t i = 0; i < shdr.sh_size / shdr.sh_entsize; ++i) {
          GElf_Rela r;
          GElf_Sym sym;
          if (gelf_getrela(data, static_cast<int>(i), &r) == nullptr) continue;
          const auto type = GELF_R_TYPE(r.r_info);
          if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
          if (gelf_getsym(symbol_data, static_cast<int>(GELF_R_SYM(r.r_info)), &sym) == nullptr) continue;
          const char* name = elf_strptr(elf, symbols_header.sh_link, sym.st_name);
          if (name != nullptr && callees.count(name) != 0) slots.insert(r.r_offset);
        }
      } else if ((shdr.sh_flags & SHF_EXECINSTR) != 0 && shdr.sh_type == SHT_PROGBITS) {
        sections.push_back({shdr.sh_addr, static_cast<const unsigned char*>(data->d_buf), data->d_size});
      } else if (shdr.sh_type == SHT_SYMTAB || shdr.sh_type == SHT_DYNSYM) {
        if (shdr.sh_type == SHT_DYNSYM && symtab) continue;
        if (shdr.sh_type == SHT_SYMTAB && !symtab) functions.clear(), symtab = true;
        for (std::size_t i = 0; shdr.sh_entsize != 0 && i < shdr.sh_size / shdr.sh_entsize; ++i) {
          GElf_Sym sym;
          if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
              sym.st_shndx == SHN_UNDEF || sym.st_size == 0)
            continue;
          if (const char* n = elf_strptr(elf, shdr.sh_link, sym.st_name); n != nullptr && *n != '\0')
            functions.push_back({n, {sym.st_value, sym.st_value + sym.st_size}});
        }
      }
    }
    const auto rel32 = [](const unsigned char* p) {
      std::int32_t v;
      std::memcpy(&v, p, sizeof v);
      return static_cast<std::int64_t>(v);
    };
    // PLT entries: [endbr64] [bnd] jmp *slot(%rip), every 16 bytes.
    for (const auto& c : sections) {
      for (std::size_t at = 0; at + 16 <= c.size; at += 16) {
        const unsigned char* p = c.bytes + at;
        std::size_t k = 0;
        if (p[0] == 0xF3 && p[1] == 0x0F && p[2] == 0x1E && p[3] == 0xFA) k = 4;
        if (p[k] == 0xF2) ++k;
        if (p[k] != 0xFF || p[k + 1] != 0x25) continue;
        const std::uint64_t slot = c.address + at + k + 6 + rel32(p + k + 2);
        if (slots.count(slot) != 0) entries.insert(c.address + at);
      }
    }
    for (const auto& [name, span] : functions) {
      for (const auto& c : sections) {
        if (span.first < c.address || span.second > c.address + c.size) continue;
        const unsigned char* p = c.bytes + (span.first - c.address);
        const std::size_t n = span.second - span.first;
        bool calls = false;
        for (std::size_t at = 0; at + 5 <= n && !calls; ++at) {
          const std::uint64_t here = span.first + at;
          if (p[at] == 0xE8 || p[at] == 0xE9) calls = entries.count(here + 5 + rel32(p + at + 1)) != 0;
          else if (at + 6 <= n && p[at] == 0xFF && (p[at + 1] == 0x15 || p[at + 1] == 0x25))
            calls = slots.count(here + 6 + rel32(p + at + 2)) != 0;
        }
        if (calls) found.insert(name);
        break;
      }
    }
  }
  if (elf != nullptr) elf_end(elf);
  ::close(fd);
  return {found.begin(), found.end()};
}

}  // namespace faultline::harness
