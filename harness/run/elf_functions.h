// Which addresses of an object file its function symbols cover (elf_functions.cc).
//
// addr2line names an address by the nearest symbol before it, whatever that symbol's size: code
// whose symbols were stripped (the CUDA runtime linked statically into RAPIDS' librmm.so) is named
// after an unrelated function that happens to precede it ("rmm::prefetch" for the runtime's exit
// teardown). The symbol table says which addresses a function really covers.
#pragma once

#include <cstdint>
#include <filesystem>
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

}  // namespace faultline::harness
