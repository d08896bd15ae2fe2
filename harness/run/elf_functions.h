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

namespace faultline::harness {

/// Whether a function symbol of `module` (.symtab, else .dynsym) covers `offset`, an address
/// less the module's load base as the agent writes frames (module+0xOFFSET). A sized symbol
/// covers [value, value + size); a sizeless one, up to the next symbol. nullopt when the module
/// cannot be read or names no function at all (fully stripped: nothing to tell). Tables are read
/// once per path and kept; safe to call from several threads.
std::optional<bool> function_covers(const std::filesystem::path& module, std::uint64_t offset);

}  // namespace faultline::harness
