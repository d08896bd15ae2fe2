// fl_race_atexit: a detached worker vs an atexit handler. main registers a handler that unmaps
// the worker's buffer, the way a library's shutdown hook releases what its threads still use.
// See race_common.h for the options.
#include "race_common.h"

FL_RACE_DEFINE_WORKER()

namespace {

std::atomic<volatile char*> buffer{nullptr};
fl_race::options options;

void release_buffer() { fl_race::release_at_exit(buffer, options, "atexit handler"); }

}  // namespace

int main(int argc, char** argv) {
  if (!fl_race::parse(argc, argv, options)) return fl_race::usage("fl_race_atexit");
  buffer.store(fl_race::map_buffer());
  std::atexit(release_buffer);
  static fl_race::worker_state s{&buffer, options.period_us};
  fl_race::start_worker(s);
  return fl_race::finish(s, options);
}
