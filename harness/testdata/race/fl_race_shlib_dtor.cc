// fl_race_shlib_dtor: a detached worker vs a shared library's __attribute__((destructor)): the
// buffer belongs to libfl_race_shlib.so, whose destructor unmaps it at exit. See race_common.h
// for the options.
#include "race_common.h"

extern "C" std::atomic<volatile char*>* fl_race_shlib_buffer();
extern "C" fl_race::options* fl_race_shlib_options();

FL_RACE_DEFINE_WORKER()

int main(int argc, char** argv) {
  fl_race::options o;
  if (!fl_race::parse(argc, argv, o)) return fl_race::usage("fl_race_shlib_dtor");
  *fl_race_shlib_options() = o;  // the library's destructor does the exit-time writes
  static fl_race::worker_state s{fl_race_shlib_buffer(), o.period_us};
  fl_race::start_worker(s);
  return fl_race::finish(s, o);
}
