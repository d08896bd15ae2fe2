// fl_race_static_dtor: a detached worker vs a static destructor (the RMM #2367 shape on a CPU).
// A global object owns a mapped buffer and unmaps it in its destructor, which runs during exit()
// while the detached worker still touches the buffer. See race_common.h for the options.
#include "race_common.h"

FL_RACE_DEFINE_WORKER()

namespace {

std::atomic<volatile char*> buffer{nullptr};
fl_race::options options;  // main's; read by the destructor (trivially destructible)

struct buffer_owner {
  buffer_owner() { buffer.store(fl_race::map_buffer()); }
  ~buffer_owner() { fl_race::release_at_exit(buffer, options, "static destructor"); }
};

buffer_owner owner;  // constructed before main; destroyed by exit()

}  // namespace

int main(int argc, char** argv) {
  if (!fl_race::parse(argc, argv, options)) return fl_race::usage("fl_race_static_dtor");
  static fl_race::worker_state s{&buffer, options.period_us};
  fl_race::start_worker(s);
  return fl_race::finish(s, options);
}
