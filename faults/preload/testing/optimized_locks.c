/* optimized_locks MODE: a C program whose lock wrappers GCC has transformed as it does at -O2,
 * for lock_points_test and fn_points_test (issue 39). Built -O2 in every build type, twice: with
 * DWARF (fl_optimized_locks_g, -g) and without (fl_optimized_locks, -g0); the build checks each
 * shape with nm and objdump (optimized_locks_shapes.cmake) so that a compiler that stops making
 * it fails the build rather than passing the tests vacuously.
 *   isra    give_slot, a static function whose struct argument GCC splits (give_slot.isra.0), ends
 *           in a tail call: jmp sem_post. Prints "isra wait=RC release=RC".
 *   inline  take_inline, a static inline sem_wait wrapper, inlined into first_taker and
 *           second_taker (no symbol of its own). Prints "inline first=RC second=RC".
 *   cold    settle_slot posts the semaphore only on an unlikely path, which GCC splits into
 *           settle_slot.cold (.text.unlikely). Prints "cold settle=RC".
 * Every mode uses one process-shared named semaphore (the lock/ points pass private ones).
 * RC: 0, or the errno name of a failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct slot {
  sem_t* sem;
  long uses;
  char label[32];
};

static const char* rc_name(int rc, int err) { return rc == 0 ? "0" : strerrorname_np(err); }

/* Only s->sem is read: GCC's IPA-SRA passes that field alone (give_slot.isra.0), and the call
 * in tail position becomes a jump. */
__attribute__((noinline)) static int give_slot(struct slot* s) { return sem_post(s->sem); }

/* Not a tail call of give_slot (it reads the result afterwards): its return address names it. */
__attribute__((noinline)) int give_back(struct slot* s) {
  const int r = give_slot(s);
  s->uses += r == 0;
  return r;
}

static inline int take_inline(sem_t* s) { return sem_wait(s); }

__attribute__((noinline)) int first_taker(sem_t* s) {
  const int r = take_inline(s);
  __asm__ volatile("" ::: "memory");
  return r;
}

__attribute__((noinline)) int second_taker(sem_t* s) {
  const int r = take_inline(s);
  __asm__ volatile("" ::: "memory");
  return r;
}

/* A cold function: the block that calls it is cold too, and goes to settle_slot.cold. */
__attribute__((cold, noinline)) void report_slow(const char* why) { fprintf(stderr, "optimized_locks: slow: %s\n", why); }

__attribute__((noinline)) int settle_slot(sem_t* s, int backlog) {
  if (__builtin_expect(backlog < 0, 0)) {
    report_slow("negative backlog");
    const int r = sem_post(s);
    __asm__ volatile("" ::: "memory"); /* after the call: no tail call, the frame is in the cold part */
    return r;
  }
  return backlog * 2;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: optimized_locks isra|inline|cold\n");
    return 2;
  }
  char name[64];
  snprintf(name, sizeof name, "/fl-optimized-locks-%d", (int)getpid());
  sem_t* s = sem_open(name, O_CREAT | O_EXCL, 0600, 1);
  if (s == SEM_FAILED) {
    perror("sem_open");
    return 1;
  }
  sem_unlink(name);
  int rc = 0;
  if (strcmp(argv[1], "isra") == 0) {
    struct slot slot = {s, 0, "isra"};
    const int w = sem_wait(s);
    const int werr = errno;
    const int p = give_back(&slot);
    printf("isra wait=%s release=%s\n", rc_name(w, werr), rc_name(p, errno));
  } else if (strcmp(argv[1], "inline") == 0) {
    const int a = first_taker(s);
    const int aerr = errno;
    sem_post(s);
    const int b = second_taker(s);
    printf("inline first=%s second=%s\n", rc_name(a, aerr), rc_name(b, errno));
    sem_post(s);
  } else if (strcmp(argv[1], "cold") == 0) {
    sem_wait(s);
    const int p = settle_slot(s, argc - 3); /* -1: the cold path, though the compiler cannot know */
    printf("cold settle=%s\n", rc_name(p, errno));
  } else {
    fprintf(stderr, "optimized_locks: unknown mode %s\n", argv[1]);
    rc = 2;
  }
  sem_close(s);
  return rc;
}
