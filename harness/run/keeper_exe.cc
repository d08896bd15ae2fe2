// faultline-keeper: a contained run's keeper, exec'd by the harness (keeper.h). Not for people:
// its arguments are the harness's plan, its environment the program's.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "harness/run/keeper.h"

int main(int argc, char** argv, char** envp) {
  namespace k = faultline::harness::keeper;
  // The watchdog: faultline-keeper --watch SOCKET LIFELINE.
  if (argc == 4 && std::string(argv[1]) == "--watch") {
    char* end1 = nullptr;
    char* end2 = nullptr;
    const long sock = std::strtol(argv[2], &end1, 10);
    const long life = std::strtol(argv[3], &end2, 10);
    if (*end1 == '\0' && *end2 == '\0' && sock > 2 && life > 2 && sock < (1 << 30) && life < (1 << 30))
      k::watchdog_main(static_cast<int>(sock), static_cast<int>(life));
    const std::string text = "faultline-keeper: --watch SOCKET LIFELINE: two descriptors above 2\n";
    [[maybe_unused]] auto n = ::write(2, text.data(), text.size());
    return 2;
  }
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
