// libfl_race_shlib.so: owns the buffer of fl_race_shlib_dtor. A constructor maps it and a
// __attribute__((destructor)) unmaps it; the loader runs that destructor at exit (_dl_fini),
// after the program's own atexit handlers and static destructors. The program hands the library
// its options (fl_race_shlib_options) so that the destructor does --exit-stderr/--exit-flood.
#include "race_common.h"

namespace {
std::atomic<volatile char*> buffer{nullptr};
fl_race::options options;
}  // namespace

[[gnu::constructor]] static void fl_race_shlib_load() { buffer.store(fl_race::map_buffer()); }
[[gnu::destructor]] static void fl_race_shlib_unload() {
  fl_race::release_at_exit(buffer, options, "library destructor");
}

extern "C" [[gnu::visibility("default")]] std::atomic<volatile char*>* fl_race_shlib_buffer() { return &buffer; }
extern "C" [[gnu::visibility("default")]] fl_race::options* fl_race_shlib_options() { return &options; }
