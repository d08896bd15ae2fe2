#include "harness/cores_cli.h"

#include <CLI/CLI.hpp>

#include "harness/cli.h"
#include "harness/detail/sys.h"
#include "harness/run/core_handler/core_handler.h"

namespace faultline::harness {
namespace {

constexpr const char* cores_about = R"(
With core_pattern "core" (the kernel's default) the kernel writes one core file per directory:
faultline holds each new core open as it appears, so runs crashing together keep their own
(one replaced within microseconds of its creation is lost), but a directory holding a core/
folder (a source tree) gets none, so those crashes are named by their signal alone. --install
(root, on the host: the kernel runs the handler from the initial namespaces) sets core_pattern
to pipe every core to faultline-core-handler, which puts a run's core in its run directory and
gives every other process's core where the previous pattern did. --remove restores the previous
pattern. Without a flag: where core_pattern stands.)";

void print_state(const core_handler_state& s, std::ostream& out) {
  out << "core_pattern: " << s.pattern << "\n";
  if (s.installed) {
    out << "faultline-core-handler: installed (" << s.handler << "); a run's cores go to its run directory, "
        << "other processes' cores where " << (s.previous ? "'" + *s.previous + "'" : std::string("the kernel's default"))
        << " puts them\n";
    return;
  }
  out << "faultline-core-handler: not installed";
  if (!s.pattern.empty() && (s.pattern[0] == '|' || s.pattern[0] == '@'))
    out << " (another crash collector has the cores: faultline reports crashes by their signal)";
  else
    out << "; `faultline cores --install` (root) keeps every crash's core of a run in its run directory";
  out << "\n";
}

}  // namespace

CLI::App* add_cores_command(CLI::App& app, cores_options& o) {
  auto* cores = app.add_subcommand("cores", "keep every crash's core: faultline cores [--install [--handler PATH] | --remove]");
  cores->footer(cores_about);
  auto* install = cores->add_flag("--install", o.install, "pipe cores to faultline-core-handler (root)");
  auto* remove = cores->add_flag("--remove", o.remove, "restore the previous core_pattern (root)");
  install->excludes(remove);
  cores->add_option("--handler", o.handler, "the handler to install (default: faultline-core-handler beside faultline)")
      ->needs(install);
  return cores;
}

int cores_command(const cores_options& o, std::ostream& out, std::ostream& err) {
  if (o.install && o.remove) {
    err << "faultline: error: --install and --remove exclude each other\n";
    return exit_usage;
  }
  if (!o.handler.empty() && !o.install) {
    err << "faultline: error: --handler needs --install\n";
    return exit_usage;
  }
  core::result<core_handler_state> state = core::status(core::errc::internal, "nothing done");
  if (o.install) {
    std::filesystem::path handler = o.handler;
    if (handler.empty()) {
      const auto dir = detail::self_dir();
      if (dir.empty()) {
        err << "faultline: error: cannot tell where faultline is (/proc/self/exe); pass --handler\n";
        return exit_failed;
      }
      handler = dir / std::string(core_handler_name);
    }
    state = install_core_handler(handler);
  } else if (o.remove) {
    state = remove_core_handler();
  } else {
    state = core_handler_status();
  }
  if (!state) {
    err << "faultline: error: " << state.error().message() << "\n";
    return exit_failed;
  }
  print_state(*state, out);
  return exit_ok;
}

}  // namespace faultline::harness
