// faultline-keeper: a contained run's keeper, exec'd by the harness (keeper.h). Not for people:
// its arguments are the harness's plan, its environment the program's.
#include <unistd.h>

#include <string>
#include <vector>

#include "harness/keeper.h"

int main(int argc, char** argv, char** envp) {
  namespace k = faultline::harness::keeper;
  k::parsed_storage storage;
  k::plan p;
  std::string error;
  if (argc < 1 || !k::parse_keeper_arguments(argc - 1, argv + 1, envp, storage, p, error)) {
    const std::string text = "faultline-keeper: " + (error.empty() ? std::string("no arguments") : error) +
                             " (it is started by faultline, not by hand)\n";
    [[maybe_unused]] auto n = ::write(2, text.data(), text.size());
    return 2;
  }
  k::keeper_main(p);
}
