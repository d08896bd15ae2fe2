// `faultline cores [--install [--handler PATH] | --remove]`: installs, removes or shows
// faultline-core-handler as core_pattern's pipe program (core_handler.h), so that every crash of
// a run keeps its core in the run's directory — whatever the program's directory holds, however
// many runs crash at once. Without a flag it prints where core_pattern stands.
//
//   CLI::App app;
//   harness::cores_options o;
//   auto* cores = harness::add_cores_command(app, o);
//   app.parse(argc, argv);
//   if (cores->parsed()) return harness::cores_command(o, std::cout, std::cerr);
//
// Exit status: 0 done (or shown), 1 when installing or removing failed (one line saying why:
// not root, core_pattern not writable here, the pattern too long, another collector installed,
// the kernel did not run the handler), 2 for a usage error.
//
// Thread safety: a plain function; core_pattern is one machine-wide file.
#pragma once

#include <ostream>
#include <string>

namespace CLI {
class App;
}

namespace faultline::harness {

/// The subcommand's options.
struct cores_options {
  bool install = false;
  bool remove = false;
  std::string handler;  ///< --handler; default: faultline-core-handler beside the running binary
};

/// Adds the `cores` subcommand to `app`, parsing into `o` (which must outlive the parse).
CLI::App* add_cores_command(CLI::App& app, cores_options& o);

/// Runs the subcommand, printing to `out` (the state) and `err` (errors).
int cores_command(const cores_options& o, std::ostream& out, std::ostream& err);

}  // namespace faultline::harness
