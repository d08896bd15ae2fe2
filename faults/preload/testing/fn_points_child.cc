// fn_points_child STEP...: calls functions that fn/ points stand before, for fn_points_test.
//   exported N   calls fn_exported_step(k) for k < N (in the dynamic symbol table): "exported SUM"
//   hidden N     the same through fn_hidden_step (a static function: the ELF symbol table only)
//   threads N    4 threads each call fn_exported_step N times: "threads SUM"
//   inside N     calls fn_asm_step(k), whose second instruction starts at byte 3, for fn/...+3
//   trap 0       raise(SIGTRAP): a trap that is no breakpoint
//   fork N       N forked children call fn_exported_step once each: "fork killed=K" (by SIGKILL)
// Each step function returns 2k + 1, so SUM says whether every call ran its first instruction.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

extern "C" [[gnu::noinline]] long fn_exported_step(long k) {
  asm volatile("" ::: "memory");
  return 2 * k + 1;
}

// 2k + 1 in three instructions of known sizes: mov (3 bytes), lea (5 bytes), ret (1): 9 bytes long.
asm(R"(
    .text
    .globl fn_asm_step
    .type fn_asm_step, @function
fn_asm_step:
    movq %rdi, %rax
    leaq 1(%rax,%rax), %rax
    ret
    .size fn_asm_step, . - fn_asm_step
)");
extern "C" long fn_asm_step(long k);

namespace {

[[gnu::noinline, gnu::used]] long fn_hidden_step(long k) {
  asm volatile("" ::: "memory");
  return 2 * k + 1;
}

long (*volatile exported)(long) = &fn_exported_step;
long (*volatile hidden)(long) = &fn_hidden_step;
long (*volatile inside)(long) = &fn_asm_step;

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const long n = std::atol(argv[i + 1]);
    long sum = 0;
    if (std::strcmp(argv[i], "exported") == 0) {
      for (long k = 0; k < n; ++k) sum += exported(k);
    } else if (std::strcmp(argv[i], "hidden") == 0) {
      for (long k = 0; k < n; ++k) sum += hidden(k);
    } else if (std::strcmp(argv[i], "inside") == 0) {
      for (long k = 0; k < n; ++k) sum += inside(k);
    } else if (std::strcmp(argv[i], "threads") == 0) {
      std::vector<long> sums(4, 0);
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&sums, t, n] {
          for (long k = 0; k < n; ++k) sums[t] += exported(k);
        });
      }
      for (auto& t : threads) t.join();
      for (long s : sums) sum += s;
    } else if (std::strcmp(argv[i], "fork") == 0) {
      for (long k = 0; k < n; ++k) {
        const pid_t pid = fork();
        if (pid == 0) _exit(exported(k) == 2 * k + 1 ? 0 : 1);
      }
      int status = 0;
      while (wait(&status) > 0) {
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ++sum;
      }
      std::printf("fork killed=%ld\n", sum);
      std::fflush(stdout);
      continue;
    } else if (std::strcmp(argv[i], "trap") == 0) {
      std::raise(SIGTRAP);
    } else {
      std::fprintf(stderr, "fn_points_child: bad step '%s'\n", argv[i]);
      return 2;
    }
    std::printf("%s %ld\n", argv[i], sum);
    std::fflush(stdout);
  }
  return 0;
}
