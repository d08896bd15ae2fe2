// Private to the agent: an ELF file's function symbols, read from a read-only mapping of it, for
// the injectors that find a program's functions by name (fn/ points, lock/ filters). Inside the
// user's process: no allocation, no exception, nothing but open/mmap/munmap/close.
//
//   detail::elf_file f(path);
//   if (f.valid())
//     f.for_each_function(SHT_SYMTAB, [&](const char* name, std::uint64_t value, std::uint64_t size, unsigned) {
//       ...; return true;  // false stops the walk
//     });
#pragma once

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "faults/preload/detail/sys.h"
namespace faultline::agent::detail {

/// A 64-bit ELF file mapped read-only for as long as the object lives.
class elf_file {
 public:
  explicit elf_file(const char* path) noexcept {
    const int fd = sys::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(sizeof(Elf64_Ehdr))) {
      void* map = sys::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (map != MAP_FAILED) {
        base_ = static_cast<const char*>(map);
        size_ = static_cast<std::uint64_t>(st.st_size);
      }
    }
    sys::close(fd);
    const auto* eh = header();
    if (base_ != nullptr && (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
                             eh->e_shoff + std::uint64_t{eh->e_shnum} * sizeof(Elf64_Shdr) > size_)) {
      sys::munmap(const_cast<char*>(base_), static_cast<std::size_t>(size_));
      base_ = nullptr;
    }
  }
  ~elf_file() {
    if (base_ != nullptr) sys::munmap(const_cast<char*>(base_), static_cast<std::size_t>(size_));
  }
  elf_file(const elf_file&) = delete;
  elf_file& operator=(const elf_file&) = delete;

  /// Mapped, and a 64-bit ELF file whose section headers lie inside it.
  [[nodiscard]] bool valid() const noexcept { return base_ != nullptr; }
  [[nodiscard]] const char* base() const noexcept { return base_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] const Elf64_Ehdr* header() const noexcept { return reinterpret_cast<const Elf64_Ehdr*>(base_); }
  [[nodiscard]] const Elf64_Shdr* sections() const noexcept {
    return reinterpret_cast<const Elf64_Shdr*>(base_ + header()->e_shoff);
  }

  /// Whether the file has a section of `type` (SHT_SYMTAB: it was not stripped).
  [[nodiscard]] bool has_section(unsigned type) const noexcept {
    for (unsigned i = 0; valid() && i < header()->e_shnum; ++i)
      if (sections()[i].sh_type == type) return true;
    return false;
  }

  /// Calls fn(name, value, size, symbol_type) for every defined function (STT_FUNC, and
  /// STT_GNU_IFUNC, whose value is its resolver's) of the symbol sections of `type` (SHT_SYMTAB
  /// or SHT_DYNSYM), until fn returns false.
  template <class Fn>
  void for_each_function(unsigned type, Fn&& fn) const noexcept {
    if (!valid()) return;
    const auto* eh = header();
    const auto* sh = sections();
    for (unsigned i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != type || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strs = sh[sh[i].sh_link];
      if (strs.sh_type == SHT_NOBITS || sh[i].sh_offset + sh[i].sh_size > size_ || strs.sh_offset + strs.sh_size > size_)
        continue;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base_ + sh[i].sh_offset);
      const std::size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
      for (std::size_t k = 0; k < n; ++k) {
        const unsigned sym_type = ELF64_ST_TYPE(syms[k].st_info);
        if ((sym_type != STT_FUNC && sym_type != STT_GNU_IFUNC) || syms[k].st_value == 0 ||
            syms[k].st_shndx == SHN_UNDEF || syms[k].st_name >= strs.sh_size)
          continue;
        if (!fn(base_ + strs.sh_offset + syms[k].st_name, syms[k].st_value, syms[k].st_size, sym_type)) return;
      }
    }
  }

 private:
  const char* base_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace faultline::agent::detail
