// lock_points_child STEP...: takes and releases locks of each kind, one line per step, for
// lock_points_test, built twice: with exported symbols (faultline_lock_points_child) and the
// ordinary way, without -rdynamic (faultline_lock_points_child_plain): a lock/ filter names a
// function among the caller's frames, found in the symbol tables either way.
//   sem-shared      a named semaphore (sem_open): "sem-shared wait=RC acquired release=RC"
//   sem-private     an unnamed thread-private one (sem_init, pshared 0): same line
//   mutex-shared    a process-shared robust mutex in shared memory: "mutex-shared lock=RC unlock=RC"
//   mutex-private   a default mutex: same line
//   flock PATH      flock(LOCK_EX) then LOCK_UN: "flock lock=RC unlock=RC"
//   fcntl PATH      F_SETLKW write lock then F_UNLCK: "fcntl lock=RC unlock=RC"
//   robust-child    a forked child takes a shared robust mutex in held_by_child() and exits
//                   holding it... unless killed first; the parent then locks it:
//                   "robust-child child=STATUS parent=ERRNAME" (EOWNERDEAD: the child died holding it)
//   robust-child-static  the same, the child taking it in worker_step(), a static function
//   sem-fork N      N forked children each wait on and post one shared named semaphore:
//                   "sem-fork killed=K" (children ended by SIGKILL)
// RC: 0, or the errno name of a failure.
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

const char* rc_name(int rc, int err) { return rc == 0 ? "0" : strerrorname_np(err); }

pthread_mutex_t* shared_mutex() {
  void* p = mmap(nullptr, sizeof(pthread_mutex_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* m = static_cast<pthread_mutex_t*>(p);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
  return m;
}

void sem_step(const char* label, sem_t* s) {
  const int w = sem_wait(s);
  const int werr = errno;
  const int p = w == 0 ? sem_post(s) : 0;
  std::printf("%s wait=%s release=%s\n", label, rc_name(w, werr), rc_name(p, errno));
}

void mutex_step(const char* label, pthread_mutex_t* m) {
  const int l = pthread_mutex_lock(m);
  const int u = l == 0 ? pthread_mutex_unlock(m) : 0;
  std::printf("%s lock=%s unlock=%s\n", label, rc_name(l, l), rc_name(u, u));
}

}  // namespace

// A static function as a C program has them (C linkage: its symbol is "worker_step"), seen only in
// .symtab, never by dladdr: robust-child-static.
extern "C" {
[[gnu::noinline]] static int worker_step(pthread_mutex_t* m) {
  const int r = pthread_mutex_lock(m);
  asm volatile("" ::: "memory");
  return r;
}
}

// A frame of its own (no tail call): the filter finds it among the lock call's callers.
extern "C" [[gnu::noinline]] int held_by_child(pthread_mutex_t* m) {
  const int r = pthread_mutex_lock(m);
  asm volatile("" ::: "memory");
  return r;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string step = argv[i];
    if (step == "sem-shared") {
      const std::string name = "/fl-lock-points-" + std::to_string(getpid());
      sem_t* s = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, 1);
      sem_unlink(name.c_str());
      sem_step("sem-shared", s);
      sem_close(s);
    } else if (step == "sem-fork" && i + 1 < argc) {
      const long n = std::atol(argv[++i]);
      const std::string name = "/fl-lock-points-fork-" + std::to_string(getpid());
      sem_t* s = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, 1);
      sem_unlink(name.c_str());
      for (long k = 0; k < n; ++k) {
        if (fork() == 0) {
          sem_wait(s);
          sem_post(s);
          _exit(0);
        }
      }
      long killed = 0;
      int status = 0;
      while (wait(&status) > 0) {
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ++killed;
      }
      std::printf("sem-fork killed=%ld\n", killed);
      sem_close(s);
    } else if (step == "sem-private") {
      sem_t s;
      sem_init(&s, 0, 1);
      sem_step("sem-private", &s);
      sem_destroy(&s);
    } else if (step == "mutex-shared") {
      mutex_step("mutex-shared", shared_mutex());
    } else if (step == "mutex-private") {
      pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
      mutex_step("mutex-private", &m);
    } else if ((step == "flock" || step == "fcntl") && i + 1 < argc) {
      const int fd = open(argv[++i], O_RDWR | O_CREAT, 0600);
      int l = 0, u = 0, lerr = 0;
      if (step == "flock") {
        l = flock(fd, LOCK_EX);
        lerr = errno;
        u = flock(fd, LOCK_UN);
      } else {
        struct flock fl{};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        l = fcntl(fd, F_SETLKW, &fl);
        lerr = errno;
        fl.l_type = F_UNLCK;
        u = fcntl(fd, F_SETLK, &fl);
      }
      std::printf("%s lock=%s unlock=%s\n", step.c_str(), rc_name(l, lerr), rc_name(u, errno));
      close(fd);
    } else if (step == "robust-child" || step == "robust-child-static") {
      pthread_mutex_t* m = shared_mutex();
      std::fflush(stdout);
      const pid_t pid = fork();
      if (pid == 0) {
        if (step == "robust-child") held_by_child(m);
        else worker_step(m);
        _exit(0);  // exits holding it
      }
      int status = 0;
      waitpid(pid, &status, 0);
      const int r = pthread_mutex_lock(m);
      if (r == EOWNERDEAD) pthread_mutex_consistent(m);
      pthread_mutex_unlock(m);
      std::printf("%s child=%d parent=%s\n",
                  step.c_str(), WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), rc_name(r, r));
    } else {
      std::fprintf(stderr, "lock_points_child: bad step '%s'\n", step.c_str());
      return 2;
    }
    std::fflush(stdout);
  }
  return 0;
}
