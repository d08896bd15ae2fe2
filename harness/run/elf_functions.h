// Which addresses of an object file its function symbols cover (elf_functions.cc).
//
// addr2line names an address by the nearest symbol before it, whatever that symbol's size: code
// whose symbols were stripped (the CUDA runtime linked statically into RAPIDS' librmm.so) is named
// after an unrelated function that happens to precede it ("rmm::prefetch" for the runtime's exit
// teardown). The symbol table says which addresses a function really covers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace faultline::harness {

/// Whether a function symbol of `module` (.symtab, else .dynsym) covers `offset`, an address
/// less the module's load base as the agent writes frames (module+0xOFFSET). A sized symbol
/// covers [value, value + size); a sizeless one, up to the next symbol. nullopt when the module
/// cannot be read or names no function at all (fully stripped: nothing to tell). Tables are read
/// once per path and kept; safe to call from several threads.
std::optional<bool> function_covers(const std::filesystem::path& module, std::uint64_t offset);

/// The function names (.symtab and .dynsym, local ones included; for a stripped file, the .symtab
/// of its separate debug file where one is found) of the program `argv0` and of
/// every library the loader would map at its start: LD_PRELOAD, then DT_NEEDED recursively,
/// found as ld.so finds them (DT_RPATH, LD_LIBRARY_PATH, DT_RUNPATH with $ORIGIN, the
/// /etc/ld.so.conf.d directories, the system directories). `env` is the program's environment
/// ("K=V": PATH finds argv0 when it has no '/'). nullopt when the program is not an ELF file (a
/// script: what it runs is not known) or a library it needs cannot be found: then nothing can be
/// said missing.
std::optional<std::set<std::string>> program_function_names(const std::string& argv0, const std::vector<std::string>& env);

/// The files program_function_names reads: the program `argv0` first, then every library the
/// loader would map at its start. nullopt where program_function_names gives none.
std::optional<std::vector<std::filesystem::path>> program_modules(const std::string& argv0, const std::vector<std::string>& env);

/// One place where the compiler inlined a function (a DW_TAG_inlined_subroutine).
struct inlined_site {
  std::string function;  ///< the inlined function: its linkage name where it has one, else its name
  std::string caller;    ///< the function whose code holds it (the enclosing subprogram's name)
  std::filesystem::path module;
  std::uint64_t entry = 0;                                        ///< link-time address of its first instruction
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  ///< [low, high), link-time addresses
};

/// What the DWARF of some modules says of inlined functions.
struct inlined_copies {
  std::vector<inlined_site> sites;                  ///< of the functions `wanted` accepted
  std::vector<std::filesystem::path> with_dwarf;    ///< the modules that had DWARF to read
};

/// The inlined copies of the functions `wanted` accepts (called with each inlined function's
/// name) in `modules`, read from each one's .debug_info, or its separate debug file's
/// (.gnu_debuglink, build id) where it was stripped. A module without DWARF adds nothing; one
/// that cannot be read is skipped. Not thread-safe (libdw's per-file state is not shared).
inlined_copies find_inlined(const std::vector<std::filesystem::path>& modules,
                               const std::function<bool(std::string_view)>& wanted);

/// The functions of `module` (.symtab, else .dynsym) whose code calls or jumps to one of
/// `callees` (imported functions: through their PLT entries or GOT slots), sorted: "what calls
/// sem_post here". x86-64 code; empty when the module cannot be read.
std::vector<std::string> functions_calling(const std::filesystem::path& module, const std::set<std::string>& callees);

}  // namespace faultline::harness
