// libfl_race_shlib.so: owns the buffer of fl_race_shlib_dtor. A constructor maps it and a
// __attribute__((destructor)) unmaps it; the loader runs that destructor at exit (_dl_fini),
// after the program's own atexit handlers and static destructors.
#include "race_common.h"

namespace {
std::atomic<volatile char*> buffer{nullptr};
}  // namespace

[[gnu::constructor]] static void fl_race_shlib_load() { buffer.store(fl_race::map_buffer()); }
[[gnu::destructor]] static void fl_race_shlib_unload() { fl_race::unmap_buffer(buffer.load()); }

extern "C" [[gnu::visibility("default")]] std::atomic<volatile char*>* fl_race_shlib_buffer() { return &buffer; }
