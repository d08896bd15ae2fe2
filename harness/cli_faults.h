// The --faults spec as the `faultline` command checks it before any run (run, exec, verify and
// agent-env): the preloaded agent's own points (exit/, cuda/, process/start, spawn/parent, lock/,
// posix/ and libc/, fn/) refuse up front an action they cannot take rather than ignore it, and
// the spec says which libraries a process must preload (preload_environment, agent_dir.h).
//
//   auto spec = faults::parse(text);                // a malformed spec: the caller's usage error
//   harness::check_agent_points(*spec);             // throws usage_error naming the item
//   bool cupti = harness::names_cuda_runtime(*spec);
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "faults/spec.h"

namespace faultline::harness {

/// A command-line mistake: run_cli prints "faultline: error: MESSAGE" and returns exit_usage.
struct usage_error {
  std::string message;
};

/// Whether the spec names CUDA runtime functions (cuda/cuda...): those points need the agent to
/// be the CUDA injection library (cuda_points.h).
bool names_cuda_runtime(const faults::spec& spec);

/// Whether the spec names lock/ points: libfaultline_lock_points.so is preloaded for them.
bool names_lock_points(const faults::spec& spec);

/// Whether the spec names libfiu's POSIX preload points (posix/, libc/): it is preloaded for them.
bool names_posix_points(const faults::spec& spec);

/// Who reads a spec: the catalog's scenarios (run, verify, soak: any name is a scenario's
/// point, checked by the scenarios), or a user's program (exec, agent-env: only the families of
/// faults/families.h exist).
enum class spec_reader { scenarios, program };

/// Throws usage_error ("--faults: ITEM ...") for the first item of `spec` that the families of
/// faults/families.h (the description the agent reads too) refuse: a point of an agent family that
/// does not exist (lock/sem/held, posix/io/oc/opne, cuda/cuNoSuchCall; with the nearest valid name
/// where one is near), for a program any point outside every family (nosuch/x), an action the
/// point cannot take (fail on a CUDA runtime call, teardown(device) outside cuda/), an @filter
/// where the point takes none, a wildcard or malformed fn/ point.
void check_agent_points(const faults::spec& spec, spec_reader reader = spec_reader::scenarios);

/// Throws usage_error for the first item of `spec` that names a function the command `argv` does
/// not have: an fn/SYMBOL, or a lock/ @FILTER (a name, or a prefix and '*'), found in no
/// symbol table of the program and the libraries it loads at start (program_function_names,
/// harness/run/elf_functions.h) of argv[0] and of every program path among the words of its
/// arguments (sh -c './prog --flag'), neither as itself nor as a compiler clone (f.isra.0,
/// f.cold: faults/symbol_names.h), nor inlined where their DWARF says (find_inlined). The message
/// gives the nearest name where one is near; where the program has no DWARF, it says that an
/// inlined function cannot be found without it, and for a lock/ filter names the program's
/// functions that call that family's lock calls (what to name instead). Nothing is refused when
/// those tables cannot all be read (a script, a library not found). Functions of libraries the
/// program dlopens later are not seen (fn/ points cannot reach them either). `env`: the
/// program's environment ("K=V").
/// Returns FAULTLINE_INLINED's value for the agent (faults/preload/detail/inlined_sites.h): the
/// inlined copies of the functions named, "" when there are none. `notes` (when given) gains, for
/// each lock/ filter whose function is found but whose program has no DWARF, what it cannot see:
/// copies inlined elsewhere, and the program's other functions that call that family's lock calls.
std::string check_program_points(const faults::spec& spec, const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                 std::vector<std::string>* notes = nullptr);

}  // namespace faultline::harness
