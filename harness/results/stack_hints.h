// What a reader of a failure's top frames should know that the frames cannot say: printed under
// them by the command's summary and the Markdown and HTML reports, the same words everywhere.
//
//   for (auto& g : summary.signatures)
//     if (auto h = harness::python_frames_hint(g.first_frames); !h.empty()) out << h << "\n";
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace faultline::harness {

/// The hint for a hang's top frames (run_record::frames: "function  (module)", "??  (module+0x10, no
/// symbol)") that are a Python interpreter's own C frames (module python* or libpython*): its
/// Python functions were not read, and py-spy would name them. "" for any other frames, and for
/// frames py-spy read (their modules are .py files).
inline std::string python_frames_hint(const std::vector<std::string>& frames) {
  for (const std::string& line : frames) {
    const auto open = line.rfind("  (");
    if (open == std::string::npos || line.back() != ')') continue;
    std::string_view module = std::string_view(line).substr(open + 3);
    module = module.substr(0, module.find_first_of("+,)"));
    if (module.size() >= 3 && module.substr(module.size() - 3) == ".py") return "";
    if (module.rfind("python", 0) == 0 || module.rfind("libpython", 0) == 0)
      return "these are the Python interpreter's own frames: with py-spy on PATH (pip install py-spy), or "
             "FAULTLINE_PY_SPY naming it, a hang's stacks and signature name the Python functions";
  }
  return "";
}

}  // namespace faultline::harness
