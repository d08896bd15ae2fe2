#include "harness/run/cpu_use.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace faultline::harness {

run_cpu_use::~run_cpu_use() {
  if (fd_ >= 0) ::close(fd_);
}

void run_cpu_use::begin() {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  stage_ = stage::starting;
}

void run_cpu_use::attach(const std::string& cgroup_dir) {
  const int fd = cgroup_dir.empty() ? -1 : ::open((cgroup_dir + "/cpu.stat").c_str(), O_RDONLY | O_CLOEXEC);
  std::lock_guard lock(mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  stage_ = stage::running;
}

void run_cpu_use::detach() {
  std::lock_guard lock(mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  stage_ = stage::ending;
}

run_cpu_use::stage run_cpu_use::where() const {
  std::lock_guard lock(mu_);
  return stage_;
}

std::optional<run_cpu_use::sample> run_cpu_use::read() const {
  char buf[256];
  ssize_t n;
  {
    std::lock_guard lock(mu_);
    if (fd_ < 0) return std::nullopt;
    // A cgroup file is generated on each read from offset 0: pread, no seek.
    n = ::pread(fd_, buf, sizeof buf - 1, 0);
  }
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // "usage_usec N\n..." comes first.
  constexpr char key[] = "usage_usec ";
  const char* at = std::strstr(buf, key);
  if (at == nullptr) return std::nullopt;
  return sample{std::chrono::microseconds(std::strtoull(at + sizeof key - 1, nullptr, 10)), std::chrono::steady_clock::now()};
}

}  // namespace faultline::harness
