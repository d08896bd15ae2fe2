#include "harness/run/elf_functions.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
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

}  // namespace faultline::harness
