// fl_testdata_crash_together AT_MS STAGGER_MS: a run that crashes at about the same moment as the
// other runs of its campaign, with a large core: it writes 192 MiB of heap (which the kernel takes
// a good part of a second to dump), sleeps until the wall-clock time AT_MS (milliseconds since the
// epoch) plus STAGGER_MS times (FAULTLINE_SEED mod 8), and dies of SIGSEGV in
// crash_together_frame(). With core_pattern "core" each crash replaces the previous one's core
// file while that one is still being written: the case the harness's core keeper exists for.
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

[[gnu::noinline]] void crash_together_frame(char* heap) {
  int* volatile target = nullptr;  // volatile: the compiler cannot prove the store faults
  *target = heap[12345];
  asm volatile("" ::: "memory");  // keep the frame (no tail call)
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fl_testdata_crash_together AT_MS STAGGER_MS\n");
    return 2;
  }
  constexpr std::size_t bytes = std::size_t{192} << 20;
  auto* heap = static_cast<char*>(std::malloc(bytes));
  if (heap == nullptr) return 3;
  std::memset(heap, 0x5a, bytes);
  const char* seed = std::getenv("FAULTLINE_SEED");
  const std::int64_t at_ms = std::strtoll(argv[1], nullptr, 10) +
                             std::strtoll(argv[2], nullptr, 10) * ((seed ? std::strtoll(seed, nullptr, 10) : 0) % 8);
  timespec at{static_cast<time_t>(at_ms / 1000), static_cast<long>(at_ms % 1000) * 1000000L};
  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, nullptr) != 0) {
  }
  crash_together_frame(heap);
  return 0;
}
