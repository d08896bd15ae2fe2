// fl_testdata_nodebug_crash: a crash in a function only the symbol table names. Built with
// -g0 -O2 and without exported symbols (no -rdynamic), so there is no DWARF and dladdr sees no
// symbol for the program's own functions: under the preloaded agent every program frame reads
// "??", and the runner must name them from the ELF .symtab (addr2line does). A detached worker
// thread writes through a null pointer in nodebug_worker_touch(), a function with internal
// linkage, while main sleeps: outcome `crash`, phase `run`, signature naming
// nodebug_worker_touch.
//
//   fl_testdata_nodebug_crash            crash as above (main gives up after 10 s and exits 3)
//   fl_testdata_nodebug_crash --offset   print "nodebug_worker_touch 0xOFF": the function's
//                                        address minus the load bias, the OFFSET a crash file
//                                        gives for it (protocol.h), and exit 0
#include <link.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

namespace {

// noclone too (GCC): an .isra/.constprop clone would be a second copy, and the address printed
// by --offset must be the code that crashes.
#if defined(__GNUC__) && !defined(__clang__)
#define FL_TESTDATA_NOINLINE __attribute__((noinline, noclone))
#else
#define FL_TESTDATA_NOINLINE __attribute__((noinline))
#endif

FL_TESTDATA_NOINLINE void nodebug_worker_touch(int value) {
  int* volatile target = nullptr;  // volatile: the compiler cannot prove the store faults
  *target = value;
  asm volatile("" ::: "memory");  // keep the frame (no tail call)
}

// The main program is the first object dl_iterate_phdr reports; its dlpi_addr is the load bias.
int main_program_bias(dl_phdr_info* info, std::size_t, void* out) {
  *static_cast<std::uintptr_t*>(out) = static_cast<std::uintptr_t>(info->dlpi_addr);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--offset") == 0) {
    std::uintptr_t bias = 0;
    ::dl_iterate_phdr(main_program_bias, &bias);
    const auto address = reinterpret_cast<std::uintptr_t>(&nodebug_worker_touch);
    std::printf("nodebug_worker_touch 0x%llx\n", static_cast<unsigned long long>(address - bias));
    return 0;
  }
  std::printf("starting work\n");
  std::fflush(stdout);
  std::thread([argc] { nodebug_worker_touch(argc); }).detach();
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::printf("the worker did not crash\n");
  return 3;
}
