// fn/<symbol> fault points for any program (fn_points.cc): the entry of a named function of the
// program or of a library loaded at its start, found in the dynamic symbol table or, failing that,
// the ELF symbol table of its file (no debug info needed): fn/lock_shrreg=kill,
// fn/_ZN3rmm2mr...=delay(50ms). fn/SYMBOL+OFFSET (decimal or 0x hex) stands at a byte offset
// inside the function instead, which must start an instruction (read it from objdump -d): the
// place a kill leaves a half-done update behind. Actions: delay, kill, abort, print, and stop: the process stops
// there (SIGSTOP) until the harness, a test or a person continues it (SIGCONT) or kills it.
//
// How: the function's first byte (or the offset's) becomes a breakpoint (int3). The agent's SIGTRAP handler, on a
// breakpoint of its own, acts, puts the original byte back and single-steps the first instruction
// (the trap flag), then sets the breakpoint again; any other SIGTRAP goes to the handler that was
// there before (the agent's crash report). While one thread steps over a breakpoint, another
// thread entering the same function in those microseconds passes without a hit. Functions of
// libraries loaded later (dlopen) are not reached; names are exact (no wildcard). x86-64 only.
// Optimized code (issue 39): a symbol that is not there as itself but as compiler clones
// (f.isra.0, f.constprop.0, f.part.0) gets a breakpoint at each clone's entry; one that is only
// inlined, at each inlined copy's entry that `faultline exec` found in the DWARF
// (FAULTLINE_INLINED). A cold part (f.cold) is no entry: named only as itself. An offset needs
// the symbol itself. The print line names the clone or copy.
#pragma once

namespace faultline::agent::fn_points {

/// Sets the breakpoints of the fn/ items of `spec`. True when one was set; an item whose symbol
/// is not found says so on stderr. Called once, from the preload's constructor, after the
/// agent's crash handlers are installed.
bool install(const char* spec) noexcept;

}  // namespace faultline::agent::fn_points
