#include "harness/run/phases.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "faults/preload/phase_table.h"
#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

bool pread_all(int fd, void* buf, std::size_t n, off_t at) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
    at += got;
  }
  return true;
}

bool pwrite_all(int fd, const void* buf, std::size_t n, off_t at) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t put = ::pwrite(fd, p, n, at);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<std::size_t>(put);
    at += put;
  }
  return true;
}

// The text up to the first NUL: the unused tail of a marker area.
std::string up_to_nul(const char* text, std::size_t n) {
  const void* end = std::memchr(text, '\0', n);
  return std::string(text, end ? static_cast<std::size_t>(static_cast<const char*>(end) - text) : n);
}

}  // namespace

core::status reset_phase_table(const fs::path& run_dir) {
  const fs::path path = run_dir / agent::phase_table_file;
  auto failed = [&](const char* what) {
    return core::status(core::errc::io_error, std::string(what) + " " + path.string() + ": " + std::strerror(errno));
  };
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return failed("open");
  agent::phase_table_header header{};
  struct stat st {};
  std::size_t dirty = agent::phase_table_bytes;  // a new or foreign file: all of it
  if (::fstat(fd, &st) == 0 && st.st_size == agent::phase_table_bytes &&
      pread_all(fd, &header, sizeof header, 0) && agent::phase_table_valid(header)) {
    dirty = std::size_t{agent::phase_slot_bytes} * (1 + std::min(header.next, agent::phase_table_slots));
  } else if (::ftruncate(fd, 0) != 0 || ::ftruncate(fd, agent::phase_table_bytes) != 0) {
    ::close(fd);
    return failed("size");
  } else {
    dirty = agent::phase_slot_bytes;  // freshly zero-filled: only the header to write
  }
  std::vector<char> zeros(dirty, '\0');
  header = {agent::phase_table_magic, agent::phase_slot_bytes, agent::phase_table_slots, 0};
  std::memcpy(zeros.data(), &header, sizeof header);
  bool ok = pwrite_all(fd, zeros.data(), zeros.size(), 0);
  ::close(fd);
  if (!ok) return failed("write");
  return {};
}

std::map<pid_t, std::string> read_phases(const fs::path& run_dir) {
  std::map<pid_t, std::string> out;
  int fd = ::open((run_dir / agent::phase_table_file).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    agent::phase_table_header header{};
    if (pread_all(fd, &header, sizeof header, 0) && agent::phase_table_valid(header)) {
      const std::uint32_t used = std::min(header.next, agent::phase_table_slots);
      std::vector<agent::phase_slot> slots(used);
      if (used > 0 && pread_all(fd, slots.data(), used * sizeof(agent::phase_slot), agent::phase_slot_bytes)) {
        for (const auto& s : slots) {
          if (s.pid <= 0) continue;
          out[s.pid] += up_to_nul(s.markers, std::min<std::size_t>(s.used, sizeof s.markers));
        }
      }
    }
    ::close(fd);
  }
  const std::string prefix = agent::phase_file_prefix;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* stop = nullptr;
    long pid = std::strtol(name.c_str() + prefix.size(), &stop, 10);
    if (stop == name.c_str() + prefix.size() || *stop != '\0' || pid <= 0) continue;
    auto text = detail::read_file(it->path(), 1 << 16);
    if (text) out[static_cast<pid_t>(pid)] += up_to_nul(text->data(), text->size());
  }
  return out;
}

}  // namespace faultline::harness
